#include "onnx/external_data.h"

#include "util/error.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <string>

namespace ps::onnximport {
namespace {

    std::int64_t elementBytes(int type)
    {
        using T = onnx::TensorProto;
        switch (type) {
        case T::DOUBLE:
        case T::INT64:
        case T::UINT64:
            return 8;
        case T::FLOAT:
        case T::INT32:
        case T::UINT32:
            return 4;
        case T::FLOAT16:
        case T::BFLOAT16:
        case T::INT16:
        case T::UINT16:
            return 2;
        case T::INT8:
        case T::UINT8:
        case T::BOOL:
            return 1;
        default:
            return 0;
        }
    }

    bool isInteger(int type)
    {
        using T = onnx::TensorProto;
        return type == T::INT64 || type == T::INT32 || type == T::INT16 || type == T::INT8 || type == T::UINT64
            || type == T::UINT32 || type == T::UINT16 || type == T::UINT8 || type == T::BOOL;
    }

    std::int64_t number(const std::string& text, const std::string& what)
    {
        std::size_t used = 0;
        long long v = -1;
        try {
            v = std::stoll(text, &used);
        } catch (const std::exception&) {
        }
        if (used != text.size() || v < 0)
            throw Error(what + " is not a byte count: '" + text + "'");
        return v;
    }

} // namespace

std::int64_t loadExternalData(onnx::ModelProto& model, const std::filesystem::path& modelPath, bool values)
{
    namespace fs = std::filesystem;
    const auto folder = modelPath.parent_path();
    std::int64_t read = 0;
    std::map<fs::path, bool> present;
    for (auto& t : *model.mutable_graph()->mutable_initializer()) {
        if (t.data_location() != onnx::TensorProto::EXTERNAL)
            continue;
        if (!values && !isInteger(t.data_type()))
            continue; // weights not wanted: neither read nor looked for
        const auto what = "initializer '" + t.name() + "'";
        std::map<std::string, std::string> keys;
        for (const auto& kv : t.external_data())
            keys[kv.key()] = kv.value();
        const auto location = keys["location"];
        const fs::path relative(location);
        const auto outside = [&] {
            throw Error(what + " keeps its values at '" + location
                + "', not a file beside the model (ONNX external data is relative to the model's folder)");
        };
        if (location.empty() || relative.is_absolute() || relative.has_root_name() || relative.has_root_path()
            || relative.lexically_normal().string().starts_with(".."))
            outside();
        const auto file = folder / relative;
        if (!present.contains(file)) {
            present[file] = fs::is_regular_file(file);
            // A link may not lead out of the model's folder (ONNX's own loader refuses the same).
            std::error_code ec;
            const auto real = fs::weakly_canonical(file, ec);
            const auto base = fs::weakly_canonical(folder.empty() ? fs::path(".") : folder, ec);
            const auto inside = real.lexically_relative(base);
            if (present[file] && (ec || inside.empty() || inside.string().starts_with("..")))
                outside();
        }
        if (!present[file])
            throw Error(what + " keeps its values in '" + file.string()
                + "', which is missing (copy it beside the model, where torch.onnx.export writes it, or import "
                  "with --no-weights to plan without the weights)");
        const auto element = elementBytes(t.data_type());
        if (element == 0)
            throw Error(
                what + " has an element type external data cannot hold here (" + std::to_string(t.data_type()) + ")");
        std::int64_t size = element;
        for (const auto d : t.dims()) {
            if (d < 0 || (d > 0 && size > std::numeric_limits<std::int64_t>::max() / d))
                throw Error(what + " has an impossible shape for its external data");
            size *= d;
        }
        const auto offset = keys.contains("offset") ? number(keys["offset"], what + "'s offset") : 0;
        const auto length = keys.contains("length") ? number(keys["length"], what + "'s length") : size;
        if (length != size)
            throw Error(what + " has " + std::to_string(length) + " bytes in '" + file.string()
                + "' but its shape needs " + std::to_string(size));
        std::error_code sizeError;
        const auto available = static_cast<std::int64_t>(fs::file_size(file, sizeError));
        if (sizeError || offset > available || size > available - offset) // before anything is allocated
            throw Error(what + " needs bytes " + std::to_string(offset) + "-" + std::to_string(offset + size) + " of '"
                + file.string() + "', which is shorter");
        std::ifstream in(file, std::ios::binary);
        std::string bytes(static_cast<std::size_t>(size), '\0');
        in.seekg(offset);
        in.read(bytes.data(), size);
        if (!in || in.gcount() != size)
            throw Error(what + " needs bytes " + std::to_string(offset) + "-" + std::to_string(offset + size) + " of '"
                + file.string() + "', which is shorter");
        t.set_raw_data(std::move(bytes));
        t.clear_external_data();
        t.set_data_location(onnx::TensorProto::DEFAULT);
        read += size;
    }
    return read;
}

std::vector<std::string> missingExternalFiles(const onnx::ModelProto& model, const std::filesystem::path& modelPath)
{
    std::vector<std::string> missing;
    for (const auto& t : model.graph().initializer()) {
        if (t.data_location() != onnx::TensorProto::EXTERNAL)
            continue;
        for (const auto& kv : t.external_data()) {
            if (kv.key() != "location")
                continue;
            const auto file = modelPath.parent_path() / kv.value();
            if (!std::filesystem::is_regular_file(file)
                && std::find(missing.begin(), missing.end(), kv.value()) == missing.end())
                missing.push_back(kv.value());
        }
    }
    return missing;
}

} // namespace ps::onnximport
