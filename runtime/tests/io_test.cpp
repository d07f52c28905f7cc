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

TEST(Safetensors, ParsesBack) {
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
