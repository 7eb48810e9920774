// POST /v1/completions bodies (`parallax serve`): parsed and checked, or a
// named RequestError (the server's 400); what was read is written back as
// JSON. The same bytes, as a model's output, go through the text stream,
// whose every chunk must be valid UTF-8 (JSON can carry nothing else).
#include <string>
#include <string_view>

#include "core/error.h"
#include "fuzz/fuzz_input.h"
#include "serve/completion_request.h"
#include "serve/text_stream.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  px::fuzz::expect_value_or_named_error([&] {
    const px::serve::CompletionRequest request =
        px::serve::parse_completion_request(body, {.context = 128, .vocab = 256});
    px::serve::to_json(request).dump();
  });
  px::serve::TextStream stream({"\n\n", "\xC3\xA9"});
  std::string text;
  for (char byte : body) {
    if (stream.stopped()) break;
    text += stream.push(byte);
  }
  text += stream.finish();
  PX_CHECK(px::serve::is_valid_utf8(text), "the text stream gave invalid UTF-8");
  return 0;
}
