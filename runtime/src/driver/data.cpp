//===- data.cpp - token files (--data, --val-data) ------------------------===//
//
// Feeds a language model's token inputs from a token file, as nanoGPT and
// llm.c users have them, instead of --input arrays: each step takes one
// random window of the file per batch row. The windows are a pure function
// of --seed and a counter of windows drawn, which checkpoints record, so a
// resumed run draws what the uninterrupted run would have.
//
//===----------------------------------------------------------------------===//

#include "driver/driver.h"

#include "dist/dist.h"
#include "spillway/runtime/token_inputs.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>

namespace spw::driver {

namespace {

constexpr int32_t kLlmcMagic = 20240520;
constexpr int64_t kLlmcHeaderBytes = 256 * 4;

// The k-th output (k from 0) of SplitMix64 seeded with `seed`: the
// generator's state after k + 1 steps, mixed. Counter-based, so any draw is
// computed without the ones before it.
uint64_t splitmix64_at(uint64_t seed, uint64_t k) {
  uint64_t z = seed + (k + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string lower(std::string s) {
  for (char &c : s)
    c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Which input is the token input and which the labels:
// spillway/runtime/token_inputs.h, shared with spillwayc's report.
using spillway::token_inputs::same_label_name;
using spillway::token_inputs::shifted_label_name;

bool token_dtype(int32_t d) { return d == SPW_I64 || d == SPW_I32; }

// The token embedding, by the names the usual models give it (GPT-2's wte,
// LLaMA's embed_tokens, BERT's and GPT-NeoX's word_embeddings / embed_in,
// nanoGPT's transformer.wte): a rank-2 parameter whose rows are the
// vocabulary. Null when none or several disagree (an export that renamed
// its weights, say); then only the kernels' index checks are left.
const ParamInfo *token_embedding(const spw_ctx *ctx) {
  static const char *const kNames[] = {"wte", "embed_tokens",
                                       "word_embeddings", "tok_embeddings",
                                       "embed_in", "token_embedding"};
  const ParamInfo *found = nullptr;
  for (const ParamInfo &p : ctx->params) {
    if (p.value->rank != 2)
      continue;
    const std::string n = lower(p.name);
    bool match = false;
    for (const char *k : kNames)
      match |= n.find(k) != std::string::npos;
    if (!match)
      continue;
    if (found && found->value->dims[0] != p.value->dims[0])
      return nullptr;
    found = &p;
  }
  return found;
}

} // namespace

TokenFile::~TokenFile() {
  if (map_)
    ::munmap(map_, size_t(map_bytes_));
}

void TokenFile::open(const std::string &file, const char *flag) {
  path = file;
  int64_t size = 0;
  FdCloser fd;
  try {
    fd = FdCloser(open_regular(file, "token file", &size));
  } catch (const Error &e) {
    fail("%s: %s", flag, e.what());
  }
  if (size == 0)
    fail("%s: token file '%s' is empty", flag, file.c_str());
  int32_t head[3] = {0, 0, 0};
  if (size >= 12 && !read_at(fd.fd, head, sizeof head, 0))
    fail("%s: cannot read token file '%s': %s", flag, file.c_str(),
         errno ? std::strerror(errno) : "unexpected end of file");
  if (size >= 12 && head[0] == kLlmcMagic) {
    // llm.c's format: 256 int32 (magic, version, token count, zeros), then
    // the tokens: uint16 in version 1 (GPT-2), uint32 in version 2 (LLaMA 3).
    format_name = "llm.c";
    if (size < kLlmcHeaderBytes)
      fail("%s: token file '%s' starts with llm.c's magic %d but is %lld "
           "bytes, shorter than its %lld-byte header: the file is truncated",
           flag, file.c_str(), kLlmcMagic, (long long)size,
           (long long)kLlmcHeaderBytes);
    if (head[1] != 1 && head[1] != 2)
      fail("%s: token file '%s' has llm.c's magic but version %d; expected "
           "1 (uint16 tokens) or 2 (uint32 tokens)",
           flag, file.c_str(), head[1]);
    item_bytes_ = head[1] == 1 ? 2 : 4;
    if (head[2] < 0)
      fail("%s: token file '%s': the llm.c header's token count is %d",
           flag, file.c_str(), head[2]);
    count = head[2];
    const int64_t want = kLlmcHeaderBytes + count * item_bytes_;
    if (size != want)
      fail("%s: token file '%s' is %lld bytes, but its llm.c header says "
           "%lld uint%d tokens (%lld bytes with the header): the file is %s",
           flag, file.c_str(), (long long)size, (long long)count,
           item_bytes_ * 8, (long long)want,
           size < want ? "truncated" : "longer than its header says");
    data_offset_ = kLlmcHeaderBytes;
  } else {
    // nanoGPT's train.bin: raw little-endian uint16 tokens.
    format_name = "raw uint16";
    if (size % 2)
      fail("%s: token file '%s' is %lld bytes, an odd count: a raw token "
           "file holds little-endian uint16 tokens (nanoGPT's train.bin); "
           "is it truncated, or another format?",
           flag, file.c_str(), (long long)size);
    item_bytes_ = 2;
    count = size / 2;
    data_offset_ = 0;
  }
  map_bytes_ = size;
  void *m = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (m == MAP_FAILED)
    fail("%s: cannot memory-map token file '%s' (%lld bytes): %s", flag,
         file.c_str(), (long long)size, std::strerror(errno));
  map_ = m;
  // The checkpoints' record of the file: the same file by another path
  // (another working directory) is the same data.
  if (char *r = ::realpath(file.c_str(), nullptr)) {
    real_path = r;
    std::free(r);
  } else {
    real_path = file;
  }
  // The windows are random: read-ahead would fetch pages no step uses.
  (void)::madvise(map_, size_t(size), MADV_RANDOM);
}

uint32_t TokenFile::at(int64_t i) const {
  const char *p = static_cast<const char *>(map_) + data_offset_ +
                  i * item_bytes_;
  if (item_bytes_ == 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

int64_t tokens_per_step(const spw_ctx *ctx, const DataFeed &data) {
  if (data)
    return data.rows * data.seq;
  const InputInfo *tok = nullptr;
  for (const InputInfo &in : ctx->inputs) {
    const spw_tensor &v = *in.view;
    if (!token_dtype(v.dtype) || v.rank != 2 || same_label_name(in.name) ||
        shifted_label_name(in.name))
      continue;
    if (tok)
      return 0;
    tok = &in;
  }
  return tok ? tok->view->numel : 0;
}

std::string DataFeed::label_rule() const {
  if (!labels)
    return "";
  return shifted ? "the next tokens (window[1:S+1])"
                 : "the same tokens (window[0:S]; the model shifts)";
}

DataFeed plan_data(spw_ctx *ctx, const Options &o) {
  DataFeed d;
  if (o.data.empty())
    return d;
  // The inputs --data feeds: those no --input gives.
  std::vector<InputInfo *> fed;
  for (InputInfo &in : ctx->inputs) {
    bool given = false;
    for (auto &[name, f] : o.inputs)
      given |= name == in.name;
    if (!given)
      fed.push_back(&in);
  }
  if (fed.empty())
    throw UsageError("--data: every input of the model has an --input file; "
                     "--data feeds the token inputs the --input flags do not "
                     "name");
  for (InputInfo *in : fed) {
    const spw_tensor &v = *in->view;
    if (!token_dtype(v.dtype) || v.rank != 2)
      throw UsageError(format(
          "--data feeds integer token inputs of shape [B, S]; input '%s' is "
          "%s %s: pass --input %s=FILE.npy for it",
          in->name.c_str(), dtype_name(v.dtype), v.shape().c_str(),
          in->name.c_str()));
  }
  std::vector<InputInfo *> tokens, labels;
  for (InputInfo *in : fed)
    (same_label_name(in->name) || shifted_label_name(in->name) ? labels
                                                               : tokens)
        .push_back(in);
  auto names = [](const std::vector<InputInfo *> &v) {
    std::string s;
    for (const InputInfo *in : v)
      s += (s.empty() ? "'" : ", '") + in->name + "'";
    return s;
  };
  if (tokens.empty() && labels.size() == 1)
    throw UsageError(format(
        "--data: the only input it would feed is %s, a labels input (by its "
        "name); --data feeds the token input too: drop that input's --input",
        names(labels).c_str()));
  if (tokens.size() != 1 || labels.size() > 1)
    throw UsageError(format(
        "--data: cannot tell the token input from the labels among the "
        "inputs it would feed (%s). It feeds one token input and at most one "
        "labels input, told apart by name: 'labels' (or 'label') gets the "
        "same tokens, the model shifting them (Hugging Face's convention); "
        "'targets', 'target' or 'y' gets the next tokens (nanoGPT's); any "
        "other name is the token input. Rename the graph's inputs when "
        "exporting (torch.onnx.export(..., input_names=[...])), or pass "
        "--input NAME=FILE.npy for the others",
        names(fed).c_str()));
  d.tokens = tokens[0];
  d.labels = labels.empty() ? nullptr : labels[0];
  const spw_tensor &tv = *d.tokens->view;
  if (d.labels) {
    const spw_tensor &lv = *d.labels->view;
    if (lv.dims[0] != tv.dims[0] || lv.dims[1] != tv.dims[1])
      throw UsageError(format("--data: labels input '%s' is %s, token input "
                              "'%s' is %s; both need the same [B, S]",
                              d.labels->name.c_str(), lv.shape().c_str(),
                              d.tokens->name.c_str(), tv.shape().c_str()));
    d.shifted = o.data_labels.empty() ? shifted_label_name(d.labels->name)
                                      : o.data_labels == "shifted";
  } else if (!o.data_labels.empty()) {
    throw UsageError(format("--data-labels %s: the inputs --data feeds (%s) "
                            "have no labels input",
                            o.data_labels.c_str(), names(fed).c_str()));
  }
  if (const ParamInfo *e = token_embedding(ctx)) {
    d.vocab = e->value->dims[0];
    d.embedding = e->name + " " + e->value->shape();
  }
  d.rows = tv.dims[0];
  d.seq = tv.dims[1];
  d.window = d.seq + (d.shifted ? 1 : 0);
  d.seed = o.seed;
  if (d.rows < 1 || d.seq < 1)
    throw UsageError(format("--data: token input '%s' is %s: no tokens to "
                            "feed",
                            d.tokens->name.c_str(), tv.shape().c_str()));
  auto check_size = [&](const TokenFile &f, const char *flag) {
    if (f.count < d.window)
      fail("%s: token file '%s' holds %lld tokens, fewer than one window of "
           "%lld (the model's sequence length %lld%s)",
           flag, f.path.c_str(), (long long)f.count, (long long)d.window,
           (long long)d.seq, d.shifted ? " + 1 for the shifted targets" : "");
  };
  d.train = std::make_unique<TokenFile>();
  d.train->open(o.data, "--data");
  check_size(*d.train, "--data");
  if (!o.val_data.empty()) {
    d.val = std::make_unique<TokenFile>();
    d.val->open(o.val_data, "--val-data");
    check_size(*d.val, "--val-data");
  }
  return d;
}

// Gives the fed inputs their one-batch buffers (before device_start, which
// copies them to the device).
void DataFeed::allocate() {
  for (InputInfo *in : {tokens, labels}) {
    if (!in)
      continue;
    in->batches = alloc_buffer(in->view->bytes());
    std::memset(in->batches.get(), 0, size_t(in->view->bytes()));
    in->num_batches = 1;
    in->view->owned.reset();
    in->view->data = in->batches.get();
  }
}

int64_t DataFeed::fill(spw_ctx *ctx, const TokenFile &f, uint64_t seed,
                       uint64_t first) {
  const int64_t starts = f.count - window + 1;
  last_starts.clear();
  int64_t largest = 0;
  // A token the embedding has no row for (the file was tokenized for
  // another vocabulary): an error before the step, on every device (the
  // CUDA gather reads such a row as zeros).
  auto check = [&](uint32_t t, int64_t at) {
    if (vocab > 0 && int64_t(t) >= vocab)
      fail("token file '%s': token %lld is %u, not below the model's "
           "vocabulary of %lld (the rows of its embedding %s): the file was "
           "tokenized for another vocabulary; tokenize the text with the "
           "model's tokenizer",
           f.path.c_str(), (long long)at, t, (long long)vocab,
           embedding.c_str());
  };
  auto put = [](InputInfo *in, int64_t i, uint32_t v) {
    if (in->view->dtype == SPW_I64)
      static_cast<int64_t *>(in->view->data)[i] = int64_t(v);
    else
      static_cast<int32_t *>(in->view->data)[i] = int32_t(v);
  };
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t start =
        int64_t(splitmix64_at(seed, first + uint64_t(r)) % uint64_t(starts));
    last_starts.push_back(start);
    for (int64_t j = 0; j < seq; ++j) {
      const uint32_t t = f.at(start + j);
      check(t, start + j);
      largest = std::max<int64_t>(largest, t);
      put(tokens, r * seq + j, t);
      if (labels) {
        const uint32_t l = shifted ? f.at(start + j + 1) : t;
        if (shifted)
          check(l, start + j + 1);
        largest = std::max<int64_t>(largest, l);
        put(labels, r * seq + j, l);
      }
    }
  }
  last_file = &f;
  // On a device the step reads its own copy of the batch.
  for (InputInfo *in : {tokens, labels})
    if (in && in->dev_batches && in->dev_batches != in->batches.get())
      ctx->device->upload(in->dev_batches, in->batches.get(),
                          in->view->bytes());
  return largest;
}

// Data parallel: rank r draws the rows r*rows .. (r+1)*rows - 1 of the
// job's step, the windows one process with every rank's rows (a model of
// batch ranks x rows) would draw, and the stream advances by all of them.
void DataFeed::feed_train(spw_ctx *ctx) {
  const int64_t ranks = dist::size(), rank = dist::rank();
  last_largest = fill(ctx, *train, seed, uint64_t(position + rank * rows));
  position += rows * ranks;
}

void DataFeed::feed_val(spw_ctx *ctx, int64_t batch) {
  // Its own stream (seed + 1): the same K batches at every evaluation, so
  // the losses compare, and none of the training stream's draws.
  const int64_t ranks = dist::size(), rank = dist::rank();
  last_largest =
      fill(ctx, *val, seed + 1, uint64_t((batch * ranks + rank) * rows));
}

std::string DataFeed::context() const {
  if (!last_file)
    return "";
  std::string starts;
  for (size_t i = 0; i < last_starts.size() && i < 4; ++i)
    starts += (i ? ", " : "") + std::to_string(last_starts[i]);
  if (last_starts.size() > 4)
    starts += ", ...";
  return format("; the batch came from token file '%s' (windows at tokens "
                "%s; its largest token id is %lld): a token id at or above "
                "the model's vocabulary size is out of range for its "
                "embedding; tokenize the text with the model's tokenizer",
                last_file->path.c_str(), starts.c_str(),
                (long long)last_largest);
}

std::string DataFeed::describe() const {
  // Data parallel: the job's windows, and this rank's part of them.
  std::string s = format(
      "  data: %s (%s, %lld tokens): %lld windows of %lld "
      "per step from --seed %llu%s; input %s gets "
      "window[0:S]",
      train->path.c_str(), train->format_name, (long long)train->count,
      (long long)(rows * dist::size()), (long long)window,
      (unsigned long long)seed,
      dist::active() ? format(" (%lld per rank)", (long long)rows).c_str() : "",
      tokens->name.c_str());
  if (labels)
    s += format(", input %s %s", labels->name.c_str(), label_rule().c_str());
  if (vocab > 0)
    s += format("; token ids below %lld (embedding %s)", (long long)vocab,
                embedding.c_str());
  if (val)
    s += format("\n  validation: %s (%s, %lld tokens)", val->path.c_str(),
                val->format_name, (long long)val->count);
  return s;
}

std::string DataFeed::fingerprint() const {
  return format("file=%s tokens=%lld format=%s seed=%llu window=%lld "
                "rows=%lld labels=%s",
                train->real_path.c_str(), (long long)train->count,
                train->format_name, (unsigned long long)seed,
                (long long)window, (long long)rows,
                !labels ? "none" : shifted ? "shifted" : "same");
}

} // namespace spw::driver
