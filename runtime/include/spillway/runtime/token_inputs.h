//===- token_inputs.h - which graph input holds the trained tokens --------===//
//
// One rule, shared by the executable (tokens/s, --data, the SSD wear line)
// and spillwayc's report (bytes written per trained token): a language
// model's token input is its one integer (int32 / int64) [B, S] input whose
// name is not a labels name; its B * S elements are the tokens of a step.
// Labels named as Hugging Face names them hold the same tokens as the token
// input (the model shifts); targets named as nanoGPT names them hold the
// next tokens. Header-only and dependency-free: the runtime, the compiler
// libraries and the tools include it alike.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_TOKEN_INPUTS_H
#define SPILLWAY_RUNTIME_TOKEN_INPUTS_H

#include <cctype>
#include <string_view>

namespace spillway {
namespace token_inputs {

// Case-insensitive equality, for names as exporters spell them.
inline bool equals_lower(std::string_view name, std::string_view lower) {
  if (name.size() != lower.size())
    return false;
  for (size_t i = 0; i < name.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(name[i])) != lower[i])
      return false;
  return true;
}

// "labels" / "label": the same tokens as the token input (the model shifts).
inline bool same_label_name(std::string_view name) {
  return equals_lower(name, "labels") || equals_lower(name, "label");
}
// "targets" / "target" / "y": the next tokens.
inline bool shifted_label_name(std::string_view name) {
  return equals_lower(name, "targets") || equals_lower(name, "target") ||
         equals_lower(name, "y");
}
inline bool label_name(std::string_view name) {
  return same_label_name(name) || shifted_label_name(name);
}

} // namespace token_inputs
} // namespace spillway

#endif
