// Plugin options: declared defaults, type checks, unknown keys with the line
// and the declared list, plugin bugs in defaults, and --option overrides.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/core/config.hpp"
#include "tessera/core/options.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

const tessera_option_decl kDecls[] = {
    {"bucket_mb", TESSERA_OPT_INT, "25", "gradient bucket size in MiB"},
    {"ratio", TESSERA_OPT_FLOAT, "0.5", "fraction kept"},
    {"overlap", TESSERA_OPT_BOOL, "true", "overlap communication with backward"},
    {"algo", TESSERA_OPT_STRING, "ring", "allreduce algorithm"},
    {"label", TESSERA_OPT_STRING, "\"two words\"", "a quoted default"},
};

std::string error_of(std::span<const tessera_option_decl> decls, const toml::table* table,
                     tessera_status expected = TESSERA_ERR_INVALID_ARGUMENT) {
  try {
    (void)resolve_options(decls, table, "run.toml: [strategy.options]");
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), expected);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(Options, DefaultsFillEveryDeclaredKey) {
  const OptionValues v = resolve_options(kDecls, nullptr, "x");
  ASSERT_EQ(v.values.size(), 5u);
  EXPECT_EQ(std::get<int64_t>(v.values.at("bucket_mb")), 25);
  EXPECT_DOUBLE_EQ(std::get<double>(v.values.at("ratio")), 0.5);
  EXPECT_TRUE(std::get<bool>(v.values.at("overlap")));
  EXPECT_EQ(std::get<std::string>(v.values.at("algo")), "ring");
  EXPECT_EQ(std::get<std::string>(v.values.at("label")), "two words");
}

TEST(Options, GivenValuesReplaceDefaultsAndIntsAreAcceptedAsFloats) {
  const toml::table t = toml::parse("bucket_mb = 50\nratio = 1\nalgo = \"tree\"");
  const OptionValues v = resolve_options(kDecls, &t, "x");
  EXPECT_EQ(std::get<int64_t>(v.values.at("bucket_mb")), 50);
  EXPECT_DOUBLE_EQ(std::get<double>(v.values.at("ratio")), 1.0);
  EXPECT_EQ(std::get<std::string>(v.values.at("algo")), "tree");
  EXPECT_TRUE(std::get<bool>(v.values.at("overlap")));  // default kept
}

TEST(Options, NoDeclarationsAndNoTableIsEmpty) {
  EXPECT_TRUE(resolve_options({}, nullptr, "x").values.empty());
  const toml::table empty;
  EXPECT_TRUE(resolve_options({}, &empty, "x").values.empty());
}

TEST(Options, UnknownKeyNamesWhereLineAndDeclaredKeys) {
  const toml::table t = toml::parse("bucket_mb = 1\n\nbukcet_mb = 2\n");
  EXPECT_EQ(error_of(kDecls, &t),
            "run.toml: [strategy.options]: unknown option 'bukcet_mb' (line 3); declared: "
            "bucket_mb, ratio, overlap, algo, label; did you mean 'bucket_mb'?");
  const toml::table other = toml::parse("x = 1\n");
  EXPECT_EQ(error_of({}, &other),
            "run.toml: [strategy.options]: unknown option 'x' (line 1); declared: none");
}

TEST(Options, WrongTypeNamesTheExpectedType) {
  const toml::table t = toml::parse("overlap = true\nbucket_mb = 2.5\n");
  EXPECT_EQ(error_of(kDecls, &t),
            "run.toml: [strategy.options]: option 'bucket_mb' (line 2) must be an int, got a "
            "float");
  const toml::table s = toml::parse("algo = 3\n");
  EXPECT_EQ(error_of(kDecls, &s),
            "run.toml: [strategy.options]: option 'algo' (line 1) must be a string, got an "
            "integer");
  const toml::table b = toml::parse("overlap = \"yes\"\n");
  EXPECT_NE(error_of(kDecls, &b).find("option 'overlap' (line 1) must be a bool, got a string"),
            std::string::npos);
}

TEST(Options, FloatOptionsMustBeFinite) {
  const toml::table inf = toml::parse("ratio = inf\n");
  EXPECT_EQ(error_of(kDecls, &inf),
            "run.toml: [strategy.options]: option 'ratio' (line 1) must be a finite number, got "
            "inf");
  const toml::table nan = toml::parse("overlap = true\nratio = -nan\n");
  EXPECT_EQ(error_of(kDecls, &nan),
            "run.toml: [strategy.options]: option 'ratio' (line 2) must be a finite number, got "
            "nan");
  const std::vector<std::string> sets{"strategy.options.ratio=-inf"};
  const Config c = parse_config("", "run.toml", sets);
  EXPECT_EQ(error_of(kDecls, &c.strategy.options),
            "run.toml: [strategy.options]: option 'ratio' (--set strategy.options.ratio=-inf) "
            "must be a finite number, got -inf");
  const tessera_option_decl inf_default[] = {{"f", TESSERA_OPT_FLOAT, "inf", "h"}};
  EXPECT_EQ(error_of(inf_default, nullptr, TESSERA_ERR_INTERNAL),
            "run.toml: [strategy.options]: plugin option 'f' has default 'inf', which is not a "
            "finite number");
}

TEST(Options, EveryProblemIsReportedInTheFilesOrder) {
  // The table sorts aaa first; the file has zzz first.
  const toml::table t = toml::parse("zzz = 1\naaa = 2\nratio = \"x\"\nbucket_mb = 4\n");
  EXPECT_EQ(error_of(kDecls, &t),
            "run.toml: [strategy.options]: unknown option 'zzz' (line 1); declared: bucket_mb, "
            "ratio, overlap, algo, label\n"
            "run.toml: [strategy.options]: unknown option 'aaa' (line 2); declared: bucket_mb, "
            "ratio, overlap, algo, label\n"
            "run.toml: [strategy.options]: option 'ratio' (line 3) must be a float, got a string");
}

TEST(Options, OptionsFromAConfigKeepTheirLines) {
  const Config c = parse_config(
      "[strategy]\nname = \"ddp\"\n[strategy.options]\nbucket_mb = 1\n"
      "overlpa = true\n",
      "run.toml");
  EXPECT_NE(error_of(kDecls, &c.strategy.options)
                .find("unknown option 'overlpa' (line 5); declared: bucket_mb, ratio, overlap, "
                      "algo, label; did you mean 'overlap'?"),
            std::string::npos);
}

TEST(Options, OptionsFromSetNameTheOverride) {
  const std::vector<std::string> sets{"strategy.options.bucket_mb=big"};
  const Config c = parse_config("", "run.toml", sets);
  EXPECT_EQ(error_of(kDecls, &c.strategy.options),
            "run.toml: [strategy.options]: option 'bucket_mb' (--set "
            "strategy.options.bucket_mb=big) must be an int, got a string");
}

TEST(Options, BadDefaultsArePluginBugsNamingTheOption) {
  const tessera_option_decl bad_int[] = {{"n", TESSERA_OPT_INT, "many", "h"}};
  EXPECT_EQ(error_of(bad_int, nullptr, TESSERA_ERR_INTERNAL),
            "run.toml: [strategy.options]: plugin option 'n' has default 'many', which is not "
            "an int");
  const tessera_option_decl float_for_int[] = {{"n", TESSERA_OPT_INT, "2.5", "h"}};
  EXPECT_NE(error_of(float_for_int, nullptr, TESSERA_ERR_INTERNAL).find("plugin option 'n'"),
            std::string::npos);
  const tessera_option_decl bad_bool[] = {{"b", TESSERA_OPT_BOOL, "yes", "h"}};
  EXPECT_NE(error_of(bad_bool, nullptr, TESSERA_ERR_INTERNAL).find("which is not a bool"),
            std::string::npos);
  const tessera_option_decl no_default[] = {{"s", TESSERA_OPT_FLOAT, nullptr, "h"}};
  EXPECT_NE(error_of(no_default, nullptr, TESSERA_ERR_INTERNAL).find("declares no default"),
            std::string::npos);
  const tessera_option_decl twice[] = {{"a", TESSERA_OPT_INT, "1", "h"},
                                       {"a", TESSERA_OPT_INT, "2", "h"}};
  EXPECT_NE(error_of(twice, nullptr, TESSERA_ERR_INTERNAL).find("declared twice"),
            std::string::npos);
  const tessera_option_decl bad_type[] = {{"t", 42, "1", "h"}};
  EXPECT_NE(error_of(bad_type, nullptr, TESSERA_ERR_INTERNAL).find("unknown type 42"),
            std::string::npos);
}

TEST(Options, AnIntDefaultIsAcceptedForAFloatOption) {
  const tessera_option_decl decls[] = {{"f", TESSERA_OPT_FLOAT, "3", "h"}};
  EXPECT_DOUBLE_EQ(std::get<double>(resolve_options(decls, nullptr, "x").values.at("f")), 3.0);
}

TEST(Options, ParseOptionOverrides) {
  const std::vector<std::string> args{"bucket_mb=50", "ratio = 0.25", "algo=tree", "overlap=false",
                                      "label=\"a b\""};
  const toml::table t = parse_option_overrides(args);
  const OptionValues v = resolve_options(kDecls, &t, "x");
  EXPECT_EQ(std::get<int64_t>(v.values.at("bucket_mb")), 50);
  EXPECT_DOUBLE_EQ(std::get<double>(v.values.at("ratio")), 0.25);
  EXPECT_EQ(std::get<std::string>(v.values.at("algo")), "tree");
  EXPECT_FALSE(std::get<bool>(v.values.at("overlap")));
  EXPECT_EQ(std::get<std::string>(v.values.at("label")), "a b");

  const std::vector<std::string> typo{"ratoi=1"};
  const toml::table bad = parse_option_overrides(typo);
  EXPECT_NE(error_of(kDecls, &bad).find("unknown option 'ratoi' (--option ratoi=1)"),
            std::string::npos);
}

TEST(Options, OptionOverrideIntegersOutOfRangeAreErrors) {
  const std::vector<std::string> args{"bucket_mb=99999999999999999999"};
  try {
    (void)parse_option_overrides(args);
    FAIL() << "an integer beyond 64 bits was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(std::string(e.what()),
              "option override 'bucket_mb=99999999999999999999': 'bucket_mb' = "
              "99999999999999999999 is out of range for an integer (-9223372036854775808 to "
              "9223372036854775807)");
  }
  const std::vector<std::string> edge{"bucket_mb=9223372036854775807"};
  const toml::table t = parse_option_overrides(edge);
  EXPECT_EQ(t["bucket_mb"].value<int64_t>(), INT64_MAX);
}

TEST(Options, MalformedOptionOverridesAreErrors) {
  for (const std::string& arg : {std::string("novalue"), std::string("=3"), std::string("a.b=1")}) {
    const std::vector<std::string> args{arg};
    EXPECT_THROW((void)parse_option_overrides(args), Error) << arg;
  }
}

TEST(Options, ValueTextAndTypeNames) {
  EXPECT_EQ(option_value_text(tessera_options::Value(true)), "true");
  EXPECT_EQ(option_value_text(tessera_options::Value(int64_t{25})), "25");
  EXPECT_EQ(option_value_text(tessera_options::Value(0.5)), "0.5");
  EXPECT_EQ(option_value_text(tessera_options::Value(2.0)), "2.0");
  EXPECT_EQ(option_value_text(tessera_options::Value(std::string("ring"))), "ring");
  EXPECT_STREQ(option_type_name(TESSERA_OPT_BOOL), "bool");
  EXPECT_STREQ(option_type_name(TESSERA_OPT_INT), "int");
  EXPECT_STREQ(option_type_name(TESSERA_OPT_FLOAT), "float");
  EXPECT_STREQ(option_type_name(TESSERA_OPT_STRING), "string");
  EXPECT_STREQ(option_type_name(99), "unknown");
}

}  // namespace
}  // namespace tessera
