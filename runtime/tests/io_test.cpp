//===- io_test.cpp - .npy reader, .safetensors writer, AdamW --------------===//

#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

using namespace spwtest;

namespace {

std::string error_of(const std::function<void()> &f) {
  try {
    f();
  } catch (const spw::Error &e) {
    return e.what();
  }
  return "";
}

TEST(Npy, ReadsF32I64I32) {
  std::vector<float> f = {1.5f, -2, 3, 4, 5, 6};
  auto a = spw::parse_npy(spw::write_npy("<f4", {2, 3}, f.data(), 24), "f.npy");
  EXPECT_EQ(a.kind, 'f');
  EXPECT_EQ(a.itemsize, 4);
  EXPECT_FALSE(a.fortran_order);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(a.data.size(), 24u);
  EXPECT_EQ(reinterpret_cast<const float *>(a.data.data())[0], 1.5f);

  std::vector<int64_t> l = {7, -1};
  auto b = spw::parse_npy(spw::write_npy("<i8", {2}, l.data(), 16), "l.npy");
  EXPECT_EQ(b.kind, 'i');
  EXPECT_EQ(b.itemsize, 8);
  EXPECT_EQ(b.shape, (std::vector<int64_t>{2}));

  int32_t s = 42;
  auto c = spw::parse_npy(spw::write_npy("<i4", {}, &s, 4), "s.npy");
  EXPECT_TRUE(c.shape.empty());
  EXPECT_EQ(c.numel(), 1);
}

TEST(Npy, HeaderVariants) {
  // Hand-written v1.0 header: other key order, double quotes, no trailing
  // comma; and a v2.0 header (4-byte length).
  std::string dict = "{\"shape\": (2,), \"fortran_order\": False, "
                     "\"descr\": \"<f4\"}";
  float d[2] = {1, 2};
  for (int major : {1, 2}) {
    std::string h = dict + std::string(64, ' ') + "\n";
    std::string f = "\x93NUMPY";
    f += char(major);
    f += char(0);
    f += char(h.size() & 0xff);
    f += char(h.size() >> 8);
    if (major == 2)
      f += std::string(2, '\0');
    f += h;
    f.append(reinterpret_cast<const char *>(d), 8);
    auto a = spw::parse_npy(f, "v.npy");
    EXPECT_EQ(a.shape, (std::vector<int64_t>{2}));
    EXPECT_EQ(a.descr, "<f4");
  }
}

TEST(Npy, Rejects) {
  double d[2] = {1, 2};
  auto f64 = spw::parse_npy(spw::write_npy("<f8", {2}, d, 16), "d.npy");
  EXPECT_EQ(f64.kind, 'f'); // parsed; the driver rejects the dtype
  EXPECT_EQ(f64.itemsize, 8);

  std::string good = spw::write_npy("<f4", {2, 3}, std::vector<float>(6).data(),
                                    24);
  std::string truncated = good.substr(0, good.size() - 5);
  EXPECT_NE(error_of([&] { spw::parse_npy(truncated, "t.npy"); })
                .find("t.npy: truncated .npy file: data is 19 bytes"),
            std::string::npos);
  EXPECT_NE(error_of([&] { spw::parse_npy("hello world, not numpy", "g.npy"); })
                .find("g.npy is not a .npy file"),
            std::string::npos);
  EXPECT_NE(error_of([&] { spw::parse_npy(good.substr(0, 20), "h.npy"); })
                .find("truncated .npy header"),
            std::string::npos);
  std::string garbage = good;
  garbage[10] = '#'; // the dict's '{'
  EXPECT_NE(error_of([&] { spw::parse_npy(garbage, "m.npy"); })
                .find("malformed .npy header"),
            std::string::npos);
  std::string extra = good + "xxxx";
  EXPECT_NE(error_of([&] { spw::parse_npy(extra, "e.npy"); })
                .find("4 bytes after the data"),
            std::string::npos);
  std::string fortran = good;
  size_t at = fortran.find("False");
  fortran.replace(at, 5, "True ");
  EXPECT_TRUE(spw::parse_npy(fortran, "f.npy").fortran_order);
  std::string be = good;
  be[be.find("<f4")] = '>';
  EXPECT_TRUE(spw::parse_npy(be, "b.npy").big_endian);
  std::string rec = "{'descr': [('a', '<f4')], 'fortran_order': False, "
                    "'shape': (1,), }\n";
  std::string file = std::string("\x93NUMPY\x01\x00", 8);
  file += char(rec.size());
  file += char(0);
  file += rec + "abcd";
  EXPECT_NE(error_of([&] { spw::parse_npy(file, "r.npy"); })
                .find("structured dtype"),
            std::string::npos);
}

TEST(Safetensors, WriterLayout) {
  auto w = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  auto idx = i64({2}, {7, 8});
  auto s = f32({}, {9});
  std::string bytes = spw::safetensors_bytes(
      {{"layer.weight", w.get()}, {"ids", idx.get()}, {"sc\"al", s.get()}});
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= uint64_t(uint8_t(bytes[size_t(i)])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + n + 24 + 16 + 4);
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.rfind("{\"__metadata__\":{\"format\":\"pt\"}", 0), 0u);
  EXPECT_NE(header.find("\"layer.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                        "\"data_offsets\":[0,24]}"),
            std::string::npos)
      << header;
  EXPECT_NE(header.find("\"ids\":{\"dtype\":\"I64\",\"shape\":[2],"
                        "\"data_offsets\":[24,40]}"),
            std::string::npos);
  EXPECT_NE(header.find("\"sc\\\"al\":{\"dtype\":\"F32\",\"shape\":[],"
                        "\"data_offsets\":[40,44]}"),
            std::string::npos);
  const char *data = bytes.data() + 8 + n;
  EXPECT_EQ(reinterpret_cast<const float *>(data)[5], 6.0f);
  EXPECT_EQ(reinterpret_cast<const int64_t *>(data + 24)[1], 8);
  EXPECT_EQ(reinterpret_cast<const float *>(data + 40)[0], 9.0f);
}

// Splits a .safetensors image into its header JSON and data size.
std::pair<std::string, int64_t> split_safetensors(const std::string &bytes) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= uint64_t(uint8_t(bytes[size_t(i)])) << (8 * i);
  return {bytes.substr(8, n), int64_t(bytes.size() - 8 - n)};
}

TEST(Safetensors, WriterOutputParsesBack) {
  auto w = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  auto idx = i64({2}, {7, 8});
  auto s = f32({}, {9});
  auto n = i32({0}, {});
  auto [json, data] = split_safetensors(spw::safetensors_bytes(
      {{"layer.weight", w.get()}, {"ids", idx.get()}, {"sc\"al\n", s.get()},
       {"empty", n.get()}}));
  auto h = spw::parse_safetensors_header(json, data, "f");
  ASSERT_EQ(h.tensors.size(), 4u);
  EXPECT_EQ(h.tensors[0].name, "layer.weight");
  EXPECT_EQ(h.tensors[0].dtype, "F32");
  EXPECT_EQ(h.tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h.tensors[0].begin, 0);
  EXPECT_EQ(h.tensors[0].end, 24);
  EXPECT_EQ(h.tensors[1].dtype, "I64");
  EXPECT_EQ(h.tensors[1].begin, 24);
  EXPECT_EQ(h.tensors[2].name, "sc\"al\n");
  EXPECT_TRUE(h.tensors[2].shape.empty());
  EXPECT_EQ(h.tensors[3].dtype, "I32");
  EXPECT_EQ(h.tensors[3].begin, h.tensors[3].end);
  ASSERT_EQ(h.metadata.size(), 1u);
  EXPECT_EQ(h.metadata[0], (std::pair<std::string, std::string>{"format",
                                                                 "pt"}));
}

TEST(Safetensors, HeaderSyntax) {
  // Whitespace, key order, escapes (incl. a surrogate pair), metadata last,
  // other dtypes, no padding.
  std::string json =
      " {\n \"b\\u00e9\\ud83d\\ude00\\/\\t\" : { \"shape\" : [ 2 ] ,"
      "\"data_offsets\":[ 0 , 4 ], \"dtype\":\"BF16\" },\r\n"
      "\"a\":{\"data_offsets\":[4,4],\"dtype\":\"F64\",\"shape\":[0,3]},"
      "\"__metadata__\":{\"k\\\"\":\"v\\\\\",\"x\":\"\"}}\t  ";
  auto h = spw::parse_safetensors_header(json, 4, "f");
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].name, "b\xc3\xa9\xf0\x9f\x98\x80/\t");
  EXPECT_EQ(h.tensors[0].dtype, "BF16");
  EXPECT_EQ(h.tensors[1].shape, (std::vector<int64_t>{0, 3}));
  ASSERT_EQ(h.metadata.size(), 2u);
  EXPECT_EQ(h.metadata[0].first, "k\"");
  EXPECT_EQ(h.metadata[0].second, "v\\");
  EXPECT_TRUE(spw::parse_safetensors_header("{}", 0, "f").tensors.empty());
  EXPECT_TRUE(spw::parse_safetensors_header("{\"__metadata__\":{}}", 0, "f")
                  .metadata.empty());
}

TEST(Safetensors, RejectsMalformedHeaders) {
  auto err = [](const std::string &json, int64_t data = 4) {
    return error_of([&] { spw::parse_safetensors_header(json, data, "F"); });
  };
  const std::string ok = "\"t\":{\"dtype\":\"F32\",\"shape\":[1],"
                         "\"data_offsets\":[0,4]}";
  EXPECT_EQ(err("{" + ok + "}"), "");
  struct Case {
    std::string json, message;
  } cases[] = {
      {"[]", "expected '{' (the header is not a JSON object), found '['"},
      {"{" + ok, "expected ',' or '}', found the end of the header"},
      {"{" + ok + "}x", "unexpected data after the header's JSON object"},
      {"{" + ok + "," + ok + "}", "duplicate key 't'"},
      {"{" + ok + ",}", "expected a string, found '}'"},
      {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],"
       "\"x\":1}}",
       "tensor 't': unknown key 'x' (expected dtype, shape, data_offsets)"},
      {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", "tensor 't': no "
                                                    "\"data_offsets\""},
      {"{\"t\":{\"dtype\":\"F32\",\"dtype\":\"F32\"}}",
       "tensor 't': duplicate key 'dtype'"},
      {"{\"t\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}",
       "tensor 't': unknown dtype 'F33'"},
      {"{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
       "tensor 't' shape: expected a non-negative integer, found a negative"},
      {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}",
       "expected an integer, found a fraction or exponent"},
      {"{\"t\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}",
       "leading zero"},
      {"{\"t\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],"
       "\"data_offsets\":[0,4]}}",
       "integer too large"},
      {"{\"t\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}",
       "expected an array for tensor 't' shape, found '\"'"},
      {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}",
       "tensor 't': data_offsets must be [begin, end], found 1 numbers"},
      {"{\"t\":{\"dtype\":F32}}", "expected a string, found 'F'"},
      {"{\"t\":3}", "expected an object for tensor 't', found '3'"},
      {"{\"t", "unterminated string"},
      {"{\"t\x01\":{}}", "control character 0x01 in a string"},
      {"{\"\\x\":{}}", "invalid escape '\\x'"},
      {"{\"\\u12g4\":{}}", "invalid hex digit in \\u escape"},
      {"{\"\\ud83d\":{}}", "unpaired high surrogate"},
      {"{\"\\ude00\":{}}", "unpaired low surrogate"},
      {"{\"__metadata__\":{\"a\":1}}",
       "__metadata__ value of 'a' must be a string, found '1'"},
      {"{\"__metadata__\":[]}", "expected an object for \"__metadata__\""},
      {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}",
       "tensor 't': data_offsets [0, 4] span 4 bytes, but F32 [2] needs 8"},
      {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}",
       "tensor 't': data_offsets [4, 0] end before they begin"},
      {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
       "tensor 't': data_offsets [4, 8] run past the end of the data "
       "section (4 bytes); is the file truncated?"},
      {"{\"t\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[2,4]}}",
       "tensor 't': data_offsets [2, 4] leave bytes [0, 2) of the data "
       "section unused"},
      {"{\"t\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[0,2]}}",
       "the data section is 4 bytes, but the tensors' data_offsets end at 2"},
      {"{\"t\":{\"dtype\":\"I8\",\"shape\":[3],\"data_offsets\":[0,3]},"
       "\"u\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[2,4]}}",
       "tensor 'u': data_offsets [2, 4] overlap those of tensor 't'"},
      {"{\"t\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],"
       "\"data_offsets\":[0,4]}}",
       "tensor 't': shape [4294967296,4294967296] is too large"},
  };
  for (const Case &c : cases) {
    std::string e = err(c.json);
    EXPECT_EQ(e.rfind("F: ", 0), 0u) << c.json << "\n" << e;
    EXPECT_NE(e.find(c.message), std::string::npos)
        << "header: " << c.json << "\nerror: " << e
        << "\nexpected: " << c.message;
  }
  EXPECT_NE(err("{\"t\x01\":{}}").find("malformed .safetensors header (at "
                                       "byte 3 of the JSON)"),
            std::string::npos);
}

// Three AdamW steps with weight decay, against numbers computed by hand
// (numpy, float32, following torch's _single_tensor_adamw operation order).
TEST(AdamW, ThreeStepsMatchTorchFormula) {
  auto ctx = spw::make_context();
  const int64_t dims[] = {3};
  int32_t p = spw_declare_param(ctx.get(), "p", SPW_F32, 1, dims, 0);
  ASSERT_EQ(ctx->error, "");
  float *w = spw_param(ctx.get(), p)->as<float>();
  w[0] = 0.5f, w[1] = -1.25f, w[2] = 2.0f;
  const std::vector<std::vector<float>> grads = {
      {0.1f, -0.2f, 0.3f}, {-0.4f, 0.05f, 0.25f}, {0.2f, 0.2f, -0.1f}};
  const double expect[3][3] = {
      {0.4895000159740448, -1.2387499809265137, 1.9880000352859497},
      {0.49460554122924805, -1.2328165769577026, 1.9761003255844116},
      {0.4952126741409302, -1.2334307432174683, 1.9682881832122803}};
  for (int t = 1; t <= 3; ++t) {
    ctx->step = t;
    auto g = f32({3}, grads[size_t(t - 1)]);
    spw_adamw(ctx.get(), p, g.get(), 0.01, 0.9, 0.999, 1e-8, 0.1);
    ASSERT_EQ(ctx->error, "");
    for (int i = 0; i < 3; ++i)
      EXPECT_FLOAT_EQ(w[i], float(expect[t - 1][i])) << "step " << t;
  }
  EXPECT_FLOAT_EQ(ctx->params[0].adam_m[0], -0.007899997755885124f);
  EXPECT_FLOAT_EQ(ctx->params[0].adam_v[1], 8.241755131166428e-05f);
  // The last gradient is recorded.
  EXPECT_EQ(reinterpret_cast<const float *>(ctx->params[0].grad.data())[2],
            -0.1f);
}

TEST(AdamW, FlagsOverrideAndEvaluateOnly) {
  auto ctx = spw::make_context();
  const int64_t dims[] = {1};
  int32_t p = spw_declare_param(ctx.get(), "p", SPW_F32, 1, dims, 0);
  float *w = spw_param(ctx.get(), p)->as<float>();
  w[0] = 1.0f;
  auto g = f32({1}, {0.5f});
  ctx->step = 1;
  ctx->evaluate_only = true;
  spw_adamw(ctx.get(), p, g.get(), 0.1, 0.9, 0.999, 1e-8, 0.0);
  EXPECT_EQ(w[0], 1.0f);
  EXPECT_EQ(ctx->params[0].grad.size(), 4u);
  ctx->evaluate_only = false;
  ctx->overrides.lr = 0.0; // the flag beats the compiled-in 0.1
  spw_adamw(ctx.get(), p, g.get(), 0.1, 0.9, 0.999, 1e-8, 0.5);
  EXPECT_EQ(w[0], 1.0f);
  ctx->params[0].adam_m.clear(); // fresh moments: a first step again
  ctx->overrides.lr = 0.01;
  spw_adamw(ctx.get(), p, g.get(), 0.1, 0.9, 0.999, 1e-8, 0.0);
  // first step of Adam moves by lr * sign(g) (up to eps)
  EXPECT_NEAR(w[0], 1.0f - 0.01f, 1e-6);
}

TEST(AdamW, GradientShapeMismatchNamesParam) {
  auto ctx = spw::make_context();
  const int64_t dims[] = {2, 2};
  int32_t p = spw_declare_param(ctx.get(), "fc.weight", SPW_F32, 2, dims, 0);
  auto g = f32({4}, {1, 2, 3, 4});
  ctx->step = 1;
  spw_param_grad(ctx.get(), p, g.get());
  EXPECT_NE(ctx->error.find("spw_param_grad: gradient of 'fc.weight' is f32 "
                            "[4], but the parameter is f32 [2,2]"),
            std::string::npos)
      << ctx->error;
}

TEST(Context, DeclarationErrors) {
  auto ctx = spw::make_context();
  const int64_t dims[] = {2};
  spw_declare_input(ctx.get(), "x", SPW_F32, 1, dims);
  spw_declare_input(ctx.get(), "x", SPW_F32, 1, dims);
  EXPECT_NE(ctx->error.find("input 'x' declared twice"), std::string::npos);
  auto ctx2 = spw::make_context();
  spw_declare_param(ctx2.get(), "w", 9, 1, dims, 0);
  EXPECT_NE(ctx2->error.find("w: unknown dtype 9"), std::string::npos)
      << ctx2->error;
}

} // namespace
