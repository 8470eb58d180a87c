#include "snapshot.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <sstream>
#include <utility>

#include "tessera/sdk/error.hpp"

namespace tessera::strategies::elastic {
namespace {

int64_t elements_of(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

void put_list(std::ostringstream& out, const std::vector<int64_t>& values) {
  out << values.size();
  for (const int64_t v : values) out << ' ' << v;
}

std::vector<int64_t> get_list(std::istringstream& in) {
  size_t n = 0;
  in >> n;
  std::vector<int64_t> values(n);
  for (int64_t& v : values) in >> v;
  return values;
}

// Calls fn(full_index, box_index, run) for each run of consecutive
// elements of the box along its last dimension.
template <typename Fn>
void for_each_run(const std::vector<int64_t>& shape, const std::vector<int64_t>& box_offset,
                  const std::vector<int64_t>& box_extent, Fn&& fn) {
  const size_t nd = shape.size();
  if (nd == 0) {
    fn(int64_t{0}, int64_t{0}, int64_t{1});
    return;
  }
  if (elements_of(box_extent) == 0) return;
  const int64_t run = box_extent[nd - 1];
  std::vector<int64_t> index(nd, 0);  // within the box, last dimension fixed at 0
  int64_t box_pos = 0;
  while (true) {
    int64_t full = 0;
    for (size_t d = 0; d < nd; ++d) full = full * shape[d] + box_offset[d] + index[d];
    fn(full, box_pos, run);
    box_pos += run;
    size_t d = nd - 1;
    while (d > 0) {
      --d;
      if (++index[d] < box_extent[d]) break;
      index[d] = 0;
      if (d == 0) return;
    }
    if (nd == 1) return;
  }
}

tessera_status write_piece(void* ctx, const tessera_tensor_slice* slice, const float* data) {
  auto& into = *static_cast<PieceCollector*>(ctx);
  std::vector<Piece>& out = *into.out;
  const bool box =
      slice->struct_size >= offsetof(tessera_tensor_slice, box_extent) + sizeof(void*) &&
      slice->box_offset != nullptr && slice->box_extent != nullptr;
  if (into.next < out.size()) {
    Piece& same = out[into.next];
    const auto nd = static_cast<size_t>(slice->ndim);
    const bool matches =
        same.name == slice->name && same.offset == slice->offset && same.count == slice->count &&
        same.shape.size() == nd && std::equal(same.shape.begin(), same.shape.end(), slice->shape) &&
        (box ? same.box_offset.size() == nd &&
                   std::equal(same.box_offset.begin(), same.box_offset.end(), slice->box_offset) &&
                   std::equal(same.box_extent.begin(), same.box_extent.end(), slice->box_extent)
             : same.box_offset.empty());
    if (matches) {
      std::copy_n(data, slice->count, same.data.begin());
      ++into.next;
      return TESSERA_OK;
    }
    out.resize(into.next);  // another layout: the rest is made anew
  }
  Piece p;
  p.name = slice->name;
  p.shape.assign(slice->shape, slice->shape + slice->ndim);
  p.offset = slice->offset;
  p.count = slice->count;
  if (box) {
    p.box_offset.assign(slice->box_offset, slice->box_offset + slice->ndim);
    p.box_extent.assign(slice->box_extent, slice->box_extent + slice->ndim);
  }
  p.data.assign(data, data + slice->count);
  out.push_back(std::move(p));
  ++into.next;
  return TESSERA_OK;
}

}  // namespace

std::string Piece::key() const {
  std::ostringstream out;
  out << name << '|' << offset << '|' << count << '|';
  put_list(out, box_offset);
  out << '|';
  put_list(out, box_extent);
  return out.str();
}

std::vector<uint8_t> encode_descriptors(const std::vector<const Piece*>& pieces) {
  std::ostringstream out;
  out << pieces.size() << '\n';
  for (const Piece* piece : pieces) {
    const Piece& p = *piece;
    out << p.name << '\n' << p.offset << ' ' << p.count << ' ';
    put_list(out, p.shape);
    out << ' ';
    put_list(out, p.box_offset);
    out << ' ';
    put_list(out, p.box_extent);
    out << '\n';
  }
  const std::string text = out.str();
  return {text.begin(), text.end()};
}

std::vector<Piece> decode_descriptors(const uint8_t* bytes, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(bytes), size));  // NOLINT
  size_t n = 0;
  in >> n;
  std::vector<Piece> pieces(n);
  for (Piece& p : pieces) {
    in >> std::ws;
    std::getline(in, p.name);
    in >> p.offset >> p.count;
    p.shape = get_list(in);
    p.box_offset = get_list(in);
    p.box_extent = get_list(in);
    p.data.assign(p.count, 0.0F);
  }
  TESSERA_CHECK(!in.fail(), TESSERA_ERR_INTERNAL, "elastic: malformed slice list of ", size,
                " bytes from a peer");
  return pieces;
}

tessera_state_writer collecting_writer(PieceCollector& into, uint32_t flags, int64_t step) {
  into.next = 0;
  tessera_state_writer w{};
  w.struct_size = sizeof w;
  w.flags = flags;
  w.ctx = &into;
  w.write = &write_piece;
  w.step = step;
  return w;
}

void Assembled::add(const Piece& piece) {
  Tensor& t = tensors_[piece.name];
  if (t.shape.empty() && t.values.empty()) {
    t.shape = piece.shape;
    const auto n = static_cast<size_t>(elements_of(piece.shape));
    t.values.assign(n, 0.0F);
    t.covered.assign(n, 0);
  }
  TESSERA_CHECK(t.shape == piece.shape, TESSERA_ERR_INTERNAL, "elastic: tensor '", piece.name,
                "' has two shapes among the survivors' pieces");
  if (piece.box_extent.empty()) {
    TESSERA_CHECK(piece.offset + piece.count <= t.values.size(), TESSERA_ERR_INTERNAL,
                  "elastic: a slice of '", piece.name, "' lies outside the tensor");
    std::copy(piece.data.begin(), piece.data.end(),
              t.values.begin() + static_cast<std::ptrdiff_t>(piece.offset));
    std::fill_n(t.covered.begin() + static_cast<std::ptrdiff_t>(piece.offset), piece.count, 1);
    return;
  }
  for_each_run(t.shape, piece.box_offset, piece.box_extent,
               [&](int64_t full, int64_t box, int64_t run) {
                 std::copy_n(piece.data.begin() + box, run, t.values.begin() + full);
                 std::fill_n(t.covered.begin() + full, run, 1);
               });
}

std::vector<std::string> Assembled::incomplete() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors_) {
    if (std::find(t.covered.begin(), t.covered.end(), 0) != t.covered.end()) {
      names.push_back(name);
    }
  }
  return names;
}

tessera_state_reader Assembled::reader() const {
  tessera_state_reader r{};
  r.struct_size = sizeof r;
  r.ctx = const_cast<Assembled*>(this);  // NOLINT: the reader only reads
  r.has = &Assembled::has;
  r.read = &Assembled::read;
  return r;
}

int32_t Assembled::has(void* ctx, const char* name) {
  const auto* self = static_cast<const Assembled*>(ctx);
  return self->tensors_.find(std::string_view(name)) != self->tensors_.end() ? 1 : 0;
}

tessera_status Assembled::read(void* ctx, const tessera_tensor_slice* slice, float* out) {
  const auto* self = static_cast<const Assembled*>(ctx);
  const auto found = self->tensors_.find(std::string_view(slice->name));
  if (found == self->tensors_.end()) return TESSERA_ERR_INVALID_ARGUMENT;
  const Tensor& t = found->second;
  const std::vector<int64_t> shape(slice->shape, slice->shape + slice->ndim);
  if (shape != t.shape) return TESSERA_ERR_INVALID_ARGUMENT;
  const bool box =
      slice->struct_size >= offsetof(tessera_tensor_slice, box_extent) + sizeof(void*) &&
      slice->box_offset != nullptr && slice->box_extent != nullptr;
  if (!box) {
    if (slice->offset + slice->count > t.values.size()) return TESSERA_ERR_INVALID_ARGUMENT;
    std::copy_n(t.values.begin() + static_cast<std::ptrdiff_t>(slice->offset), slice->count, out);
    return TESSERA_OK;
  }
  const std::vector<int64_t> offset(slice->box_offset, slice->box_offset + slice->ndim);
  const std::vector<int64_t> extent(slice->box_extent, slice->box_extent + slice->ndim);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (offset[d] < 0 || extent[d] < 0 || offset[d] + extent[d] > shape[d]) {
      return TESSERA_ERR_INVALID_ARGUMENT;
    }
  }
  for_each_run(t.shape, offset, extent, [&](int64_t full, int64_t pos, int64_t run) {
    std::copy_n(t.values.begin() + full, run, out + pos);
  });
  return TESSERA_OK;
}

std::vector<uint8_t> exchange_bytes(const sdk::Host& host, sdk::CommView& comm,
                                    const std::vector<uint8_t>& bytes, int32_t to, int32_t from,
                                    int32_t tag) {
  std::vector<int64_t> mine{static_cast<int64_t>(bytes.size())};
  std::vector<int64_t> theirs{0};
  {
    sdk::PendingOp sent = comm.start_send(std::span<const int64_t>(mine), to, tag);
    comm.recv(std::span<int64_t>(theirs), from, tag);
    sent.wait(host);
  }
  std::vector<uint8_t> got(static_cast<size_t>(theirs[0]));
  // Empty lists are not sent: both ends know the length.
  sdk::PendingOp sent;
  if (!bytes.empty()) sent = comm.start_send(std::span<const uint8_t>(bytes), to, tag + 1);
  if (!got.empty()) comm.recv(std::span<uint8_t>(got), from, tag + 1);
  sent.wait(host);
  return got;
}

namespace {
template <typename T>
std::vector<std::vector<T>> allgather_blocks(sdk::CommView& comm, const std::vector<T>& mine) {
  const auto n = static_cast<size_t>(comm.size());
  std::vector<int64_t> length{static_cast<int64_t>(mine.size())};
  std::vector<int64_t> lengths(n);
  comm.allgather(std::span<const int64_t>(length), std::span<int64_t>(lengths));
  const auto widest = static_cast<size_t>(*std::max_element(lengths.begin(), lengths.end()));
  std::vector<std::vector<T>> out(n);
  if (widest == 0) return out;
  std::vector<T> block(widest, T{});
  std::copy(mine.begin(), mine.end(), block.begin());
  std::vector<T> all(widest * n);
  comm.allgather(std::span<const T>(block), std::span<T>(all));
  for (size_t r = 0; r < n; ++r) {
    const auto begin = all.begin() + static_cast<std::ptrdiff_t>(r * widest);
    out[r].assign(begin, begin + lengths[r]);
  }
  return out;
}
}  // namespace

std::vector<std::vector<uint8_t>> allgather_bytes(sdk::CommView& comm,
                                                  const std::vector<uint8_t>& bytes) {
  return allgather_blocks(comm, bytes);
}

std::vector<std::vector<float>> allgather_floats(sdk::CommView& comm,
                                                 const std::vector<float>& values) {
  return allgather_blocks(comm, values);
}

}  // namespace tessera::strategies::elastic
