// Reading an ONNX file: the ModelProto parsed, run through the ONNX checker,
// its decomposed LayerNorms fused (fuse.h) and checked for what the
// importer relies on (opset, initializer sizes, operators it knows), each
// failure one line naming the file.
#pragma once

#include <string>

#include <onnx/onnx_pb.h>

namespace px::nn {

// The default-domain ("ai.onnx") opsets read: what torch 1.13 exports.
inline constexpr int64_t kMinOpset = 13;
inline constexpr int64_t kMaxOpset = 17;

// px::Error (one line, naming `path`) for a missing, truncated or corrupt
// file, a model the checker rejects, an opset outside [kMinOpset,
// kMaxOpset] or of another domain, an initializer whose data disagrees with
// its dims or is stored outside the file, or a node of an unsupported type.
::onnx::ModelProto load_onnx(const std::string& path);

}  // namespace px::nn
