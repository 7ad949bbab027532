// libFuzzer target: core/onnx/onnx_import.h on arbitrary bytes. A ps::Error is a clean rejection;
// a crash, sanitizer report, leak, other exception or timeout is a finding.
#include "fuzz_support.h"
#include "onnx/onnx_import.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const ps::fuzz::InputFile file(data, size, ".onnx");
    ps::OnnxImportOptions options;
    options.batch = 2; // small bound sizes keep shape arithmetic (and folded constants) small
    options.sequence = 8;
    try {
        (void)ps::importOnnx(file.path(), options);
    } catch (const ps::Error&) {
    }
    return 0;
}
