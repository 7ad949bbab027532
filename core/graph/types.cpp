#include "graph/types.h"

#include "graph/op_registry.h"
#include "util/error.h"

#include <array>
#include <charconv>
#include <limits>
#include <utility>

namespace ps {
namespace {

    constexpr std::array kDTypeNames = {
        std::pair { DType::F32, std::string_view("f32") },
        std::pair { DType::F16, std::string_view("f16") },
        std::pair { DType::BF16, std::string_view("bf16") },
        std::pair { DType::F64, std::string_view("f64") },
        std::pair { DType::I64, std::string_view("i64") },
        std::pair { DType::I32, std::string_view("i32") },
        std::pair { DType::I8, std::string_view("i8") },
        std::pair { DType::U8, std::string_view("u8") },
        std::pair { DType::Bool, std::string_view("bool") },
    };

    constexpr std::array kKindNames = {
        std::pair { TensorKind::Activation, std::string_view("activation") },
        std::pair { TensorKind::Parameter, std::string_view("parameter") },
        std::pair { TensorKind::Input, std::string_view("input") },
        std::pair { TensorKind::Constant, std::string_view("constant") },
    };

    template <typename Table, typename Enum> std::string_view lookupName(const Table& table, Enum value)
    {
        for (const auto& [e, name] : table) {
            if (e == value)
                return name;
        }
        return "?";
    }

    template <typename Enum, typename Table> std::optional<Enum> lookupValue(const Table& table, std::string_view name)
    {
        for (const auto& [e, n] : table) {
            if (n == name)
                return e;
        }
        return std::nullopt;
    }

} // namespace

const std::vector<OpTypeInfo>& allOpTypes()
{
    static const std::vector<OpTypeInfo> kOps = [] {
        std::vector<OpTypeInfo> ops;
        for (const auto& def : opDefs())
            ops.push_back({ def.type, def.name, def.isView });
        return ops;
    }();
    return kOps;
}

std::string_view toString(DType dtype)
{
    return lookupName(kDTypeNames, dtype);
}

std::string_view toString(TensorKind kind)
{
    return lookupName(kKindNames, kind);
}

std::string_view toString(OpType op)
{
    const auto i = static_cast<std::size_t>(op);
    return i < opDefs().size() ? opDefs()[i].name : std::string_view("?");
}

bool isViewOp(OpType op)
{
    const auto i = static_cast<std::size_t>(op);
    return i < opDefs().size() && opDefs()[i].isView;
}

std::optional<DType> parseDType(std::string_view name)
{
    return lookupValue<DType>(kDTypeNames, name);
}

std::optional<TensorKind> parseTensorKind(std::string_view name)
{
    return lookupValue<TensorKind>(kKindNames, name);
}

std::optional<OpType> parseOpType(std::string_view name)
{
    for (const auto& info : allOpTypes()) {
        if (info.name == name)
            return info.type;
    }
    return std::nullopt;
}

std::int64_t bytesPerElement(DType dtype)
{
    switch (dtype) {
    case DType::F64:
    case DType::I64:
        return 8;
    case DType::F32:
    case DType::I32:
        return 4;
    case DType::F16:
    case DType::BF16:
        return 2;
    case DType::I8:
    case DType::U8:
    case DType::Bool:
        return 1;
    }
    return 0;
}

std::int64_t numElements(const Shape& shape)
{
    // Saturates instead of overflowing on the absurd shapes a malformed file can declare (found by
    // tests/fuzz); the callers reject such sizes.
    std::int64_t n = 1;
    for (auto d : shape) {
        if (__builtin_mul_overflow(n, d, &n))
            return std::numeric_limits<std::int64_t>::max();
    }
    return n;
}

std::int64_t numBytes(const Shape& shape, DType dtype)
{
    std::int64_t bytes = 0;
    if (__builtin_mul_overflow(numElements(shape), static_cast<std::int64_t>(bytesPerElement(dtype)), &bytes))
        return std::numeric_limits<std::int64_t>::max();
    return bytes;
}

std::string formatShape(const Shape& shape)
{
    std::string out = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i > 0)
            out += ", ";
        out += std::to_string(shape[i]);
    }
    return out + ")";
}

std::string joinShape(const Shape& shape)
{
    std::string out;
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i > 0)
            out += ',';
        out += std::to_string(shape[i]);
    }
    return out;
}

Shape splitShape(std::string_view text)
{
    Shape shape;
    while (!text.empty()) {
        const auto comma = text.find(',');
        const auto part = text.substr(0, comma);
        std::int64_t value = 0;
        const auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
        if (ec != std::errc() || ptr != part.data() + part.size())
            throw Error("malformed shape '" + std::string(text) + "'");
        shape.push_back(value);
        text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    }
    return shape;
}

} // namespace ps
