// A device mesh: the world's ranks laid out on named axes (e.g. dp x pp x
// tp), rank <-> coordinates, and the sub-communicator over any of the axes,
// so strategies that combine several kinds of parallelism build their
// groups one way.
//
// Axes are listed outermost first: the last axis is the innermost, i.e.
// consecutive world ranks differ in it first. World rank r has the
// coordinates of r in mixed radix with the axis sizes as digits:
//
//   Mesh({{"dp", 2}, {"pp", 2}, {"tp", 2}}, 8, rank)
//   rank = (dp * 2 + pp) * 2 + tp     (the tp groups are [0 1] [2 3] ...)
//
// so put the axis whose groups talk most (tensor parallelism) last, where
// its groups sit on neighbouring ranks (one node under the usual launch).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/sdk/comm_view.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::sdk {

// One axis of a Mesh: its name and how many ranks lie along it.
struct MeshAxis {
  std::string name;
  int32_t size = 1;
};

// The world's ranks on named axes, as seen from one rank. Every refusal is
// an Error(TESSERA_ERR_INVALID_ARGUMENT) naming the mesh's axes and sizes.
class Mesh {
 public:
  // `axes` outermost first; their sizes must multiply to `world_size`,
  // each be >= 1, their names non-empty and distinct; `rank` in
  // [0, world_size).
  Mesh(std::vector<MeshAxis> axes, int32_t world_size, int32_t rank)
      : axes_(std::move(axes)), world_size_(world_size), rank_(rank) {
    TESSERA_CHECK(!axes_.empty(), TESSERA_ERR_INVALID_ARGUMENT, "mesh has no axes");
    int64_t ranks = 1;
    for (size_t i = 0; i < axes_.size(); ++i) {
      const MeshAxis& a = axes_[i];
      TESSERA_CHECK(!a.name.empty(), TESSERA_ERR_INVALID_ARGUMENT, "mesh ", describe_shape(),
                    ": axis ", i, " has an empty name");
      TESSERA_CHECK(a.size >= 1, TESSERA_ERR_INVALID_ARGUMENT, "mesh ", describe_shape(),
                    ": axis '", a.name, "' has size ", a.size,
                    "; every axis needs at least 1 rank");
      for (size_t j = 0; j < i; ++j) {
        TESSERA_CHECK(axes_[j].name != a.name, TESSERA_ERR_INVALID_ARGUMENT, "mesh ",
                      describe_shape(), ": axis '", a.name, "' is named twice");
      }
      ranks = std::min<int64_t>(ranks * a.size, int64_t{1} << 40);  // no overflow
    }
    TESSERA_CHECK(ranks == world_size_, TESSERA_ERR_INVALID_ARGUMENT, "mesh ", describe_shape(),
                  " has ", ranks, " ranks, but the world has ", world_size_);
    check_rank(rank_);
    coords_ = coords_of(rank_);
  }

  // The axes, outermost first.
  [[nodiscard]] const std::vector<MeshAxis>& axes() const noexcept { return axes_; }
  // The number of ranks (the product of the axis sizes).
  [[nodiscard]] int32_t world_size() const noexcept { return world_size_; }
  // The world rank this mesh was built for.
  [[nodiscard]] int32_t rank() const noexcept { return rank_; }

  // The index of `axis` in axes(); throws naming it and the known axes.
  [[nodiscard]] size_t axis_index(const std::string& axis) const {
    size_t i = 0;
    while (i < axes_.size() && axes_[i].name != axis) ++i;
    TESSERA_CHECK(i < axes_.size(), TESSERA_ERR_INVALID_ARGUMENT, "mesh ", describe_shape(),
                  " has no axis '", axis, "' (axes: ", axis_names(), ")");
    return i;
  }
  // How many ranks lie along `axis`.
  [[nodiscard]] int32_t size(const std::string& axis) const { return axes_[axis_index(axis)].size; }
  // This rank's coordinate on `axis`, in [0, size(axis)).
  [[nodiscard]] int32_t coord(const std::string& axis) const { return coords_[axis_index(axis)]; }
  // This rank's coordinates, one per axis in axes() order.
  [[nodiscard]] const std::vector<int32_t>& coords() const noexcept { return coords_; }

  // The coordinates of world rank `rank` (throws when out of range).
  [[nodiscard]] std::vector<int32_t> coords_of(int32_t rank) const {
    check_rank(rank);
    std::vector<int32_t> c(axes_.size());
    for (size_t i = axes_.size(); i-- > 0;) {
      c[i] = rank % axes_[i].size;
      rank /= axes_[i].size;
    }
    return c;
  }
  // The world rank at `coords` (one per axis, each in [0, size)).
  [[nodiscard]] int32_t rank_of(std::span<const int32_t> coords) const {
    TESSERA_CHECK(coords.size() == axes_.size(), TESSERA_ERR_INVALID_ARGUMENT, "mesh ",
                  describe_shape(), ": ", coords.size(), " coordinates given for ", axes_.size(),
                  " axes");
    int32_t r = 0;
    for (size_t i = 0; i < axes_.size(); ++i) {
      TESSERA_CHECK(coords[i] >= 0 && coords[i] < axes_[i].size, TESSERA_ERR_INVALID_ARGUMENT,
                    "mesh ", describe_shape(), ": coordinate ", coords[i], " of axis '",
                    axes_[i].name, "' is out of range [0, ", axes_[i].size, ")");
      r = r * axes_[i].size + coords[i];
    }
    return r;
  }

  // The sub-communicator of `comm` (the world this mesh describes) over
  // the named axes: the ranks that share this rank's coordinates on every
  // other axis. `group_axes` is one axis or several, listed in the mesh's
  // order. A rank's position in the group is its index row-major over the
  // named axes (the last one fastest): for one axis, its coordinate on it.
  // Built by one collective comm.split(color, key) (color: the coordinates
  // on the other axes, flattened; key: that index), so every rank of the
  // world must call it, with the same axes and in the same order relative
  // to its other collectives on `comm`.
  [[nodiscard]] std::unique_ptr<CommView> group(CommView& comm,
                                                const std::vector<std::string>& group_axes) const {
    const std::vector<bool> in = select(group_axes);
    TESSERA_CHECK(comm.size() == world_size_ && comm.rank() == rank_, TESSERA_ERR_INVALID_ARGUMENT,
                  "mesh ", describe_shape(), " is for rank ", rank_, " of ", world_size_,
                  ", but the communicator is rank ", comm.rank(), " of ", comm.size());
    return comm.split(flatten(coords_, in, false), flatten(coords_, in, true));
  }

  // The world ranks of this rank's group over `group_axes` (see group()),
  // in group order: element i is the world rank at position i.
  [[nodiscard]] std::vector<int32_t> group_ranks(const std::vector<std::string>& group_axes) const {
    const std::vector<bool> in = select(group_axes);
    return ranks_of_group(coords_, in);
  }

  // Every group over `group_axes`, each as its world ranks in group order;
  // the groups ordered by their lowest rank.
  [[nodiscard]] std::vector<std::vector<int32_t>> all_groups(
      const std::vector<std::string>& group_axes) const {
    const std::vector<bool> in = select(group_axes);
    std::vector<std::vector<int32_t>> out;
    for (int32_t r = 0; r < world_size_; ++r) {
      const std::vector<int32_t> c = coords_of(r);
      if (flatten(c, in, true) == 0) out.push_back(ranks_of_group(c, in));
    }
    return out;
  }

  // The shape, e.g. "dp=2 x pp=2 x tp=2 (tp innermost)".
  [[nodiscard]] std::string describe() const {
    return describe_shape() + " (" + axes_.back().name + " innermost)";
  }
  // Every group over `group_axes` as world-rank lists, e.g.
  // "tp groups: [0 1] [2 3] [4 5] [6 7]" (axes joined by " x " for several).
  [[nodiscard]] std::string describe_groups(const std::vector<std::string>& group_axes) const {
    const std::vector<std::vector<int32_t>> groups = all_groups(group_axes);
    std::string s;
    for (size_t i = 0; i < group_axes.size(); ++i) s += (i > 0 ? " x " : "") + group_axes[i];
    s += " groups:";
    for (const std::vector<int32_t>& g : groups) {
      s += " [";
      for (size_t i = 0; i < g.size(); ++i) s += (i > 0 ? " " : "") + std::to_string(g[i]);
      s += "]";
    }
    return s;
  }

 private:
  // "dp=2 x pp=2 x tp=2" (as given, before validation).
  [[nodiscard]] std::string describe_shape() const {
    std::string s;
    for (size_t i = 0; i < axes_.size(); ++i) {
      s += (i > 0 ? " x " : "") + axes_[i].name + "=" + std::to_string(axes_[i].size);
    }
    return s;
  }
  [[nodiscard]] std::string axis_names() const {
    std::string s;
    for (size_t i = 0; i < axes_.size(); ++i) s += (i > 0 ? ", " : "") + axes_[i].name;
    return s;
  }
  void check_rank(int32_t rank) const {
    TESSERA_CHECK(rank >= 0 && rank < world_size_, TESSERA_ERR_INVALID_ARGUMENT, "mesh ",
                  describe_shape(), ": rank ", rank, " is out of range [0, ", world_size_, ")");
  }
  // Per axis, whether `group_axes` names it: known, distinct, at least one,
  // in the mesh's order.
  [[nodiscard]] std::vector<bool> select(const std::vector<std::string>& group_axes) const {
    TESSERA_CHECK(!group_axes.empty(), TESSERA_ERR_INVALID_ARGUMENT, "mesh ", describe_shape(),
                  ": a group needs at least one axis (axes: ", axis_names(), ")");
    std::vector<bool> in(axes_.size(), false);
    size_t last = 0;
    for (size_t k = 0; k < group_axes.size(); ++k) {
      const size_t i = axis_index(group_axes[k]);
      TESSERA_CHECK(!in[i], TESSERA_ERR_INVALID_ARGUMENT, "mesh ", describe_shape(), ": axis '",
                    group_axes[k], "' is named twice in a group");
      TESSERA_CHECK(k == 0 || i > last, TESSERA_ERR_INVALID_ARGUMENT, "mesh ", describe_shape(),
                    ": a group's axes must follow the mesh's order (", axis_names(), "), but '",
                    group_axes[k], "' comes after '", axes_[last].name, "'");
      in[i] = true;
      last = i;
    }
    return in;
  }
  // The index row-major over the axes with in[i] == inside (the last
  // fastest): the position in the group (inside) or the group's color.
  [[nodiscard]] int32_t flatten(const std::vector<int32_t>& c, const std::vector<bool>& in,
                                bool inside) const {
    int32_t index = 0;
    for (size_t i = 0; i < axes_.size(); ++i) {
      if (in[i] == inside) index = index * axes_[i].size + c[i];
    }
    return index;
  }
  // The world ranks of the group over the axes `in` through coordinates
  // `c`, in group order.
  [[nodiscard]] std::vector<int32_t> ranks_of_group(std::vector<int32_t> c,
                                                    const std::vector<bool>& in) const {
    int32_t n = 1;
    for (size_t i = 0; i < axes_.size(); ++i) {
      if (in[i]) n *= axes_[i].size;
    }
    std::vector<int32_t> out;
    out.reserve(static_cast<size_t>(n));
    for (int32_t k = 0; k < n; ++k) {
      int32_t rest = k;
      for (size_t i = axes_.size(); i-- > 0;) {
        if (!in[i]) continue;
        c[i] = rest % axes_[i].size;
        rest /= axes_[i].size;
      }
      out.push_back(rank_of(c));
    }
    return out;
  }

  std::vector<MeshAxis> axes_;
  int32_t world_size_;
  int32_t rank_;
  std::vector<int32_t> coords_;
};

}  // namespace tessera::sdk
