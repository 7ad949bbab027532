// The layout ops of shape folding on folded values (split from shape_folding.cpp).
#include "onnx/shape_folding_support.h"

#include <algorithm>
#include <numeric>

namespace ps::onnximport::folding {

std::optional<FoldedTensor> gather(const onnx::NodeProto& n, const FoldedTensor& data, const FoldedTensor& idx)
{
    const auto rank = static_cast<std::int64_t>(data.shape.size());
    const auto axis = normalize(attrInt(n, "axis", 0), rank);
    if (axis < 0 || axis >= rank)
        return std::nullopt;
    const auto a = static_cast<std::size_t>(axis);
    Dims shape(data.shape.begin(), data.shape.begin() + axis);
    shape.insert(shape.end(), idx.shape.begin(), idx.shape.end());
    shape.insert(shape.end(), data.shape.begin() + axis + 1, data.shape.end());
    if (count(shape) > kMaxElements)
        return std::nullopt;
    const auto outer = count(Dims(data.shape.begin(), data.shape.begin() + axis));
    const auto inner = count(Dims(data.shape.begin() + axis + 1, data.shape.end()));
    FoldedTensor out { shape, data.elemType, {} };
    for (std::int64_t o = 0; o < outer; ++o) {
        for (auto i : idx.ints()) {
            const auto j = normalize(i, data.shape[a]);
            if (j < 0 || j >= data.shape[a])
                return std::nullopt;
            const auto base = (o * data.shape[a] + j) * inner;
            out.values.insert(out.values.end(), data.values.begin() + base, data.values.begin() + base + inner);
        }
    }
    return out;
}

std::optional<FoldedTensor> slice(const onnx::NodeProto& n, const Known& k)
{
    const auto& data = k.at(n.input(0));
    const auto rank = static_cast<std::int64_t>(data.shape.size());
    const auto starts = k.at(n.input(1)).ints();
    const auto ends = k.at(n.input(2)).ints();
    Dims axes;
    if (n.input_size() > 3 && !n.input(3).empty())
        axes = k.at(n.input(3)).ints();
    else
        for (std::size_t i = 0; i < starts.size(); ++i)
            axes.push_back(static_cast<std::int64_t>(i));
    Dims steps(starts.size(), 1);
    if (n.input_size() > 4 && !n.input(4).empty())
        steps = k.at(n.input(4)).ints();
    if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
        return std::nullopt;
    Dims begin(data.shape.size(), 0);
    Dims step(data.shape.size(), 1);
    Dims shape = data.shape;
    for (std::size_t i = 0; i < axes.size(); ++i) {
        const auto axis = normalize(axes[i], rank);
        if (axis < 0 || axis >= rank || steps[i] == 0)
            return std::nullopt;
        const auto a = static_cast<std::size_t>(axis);
        const auto size = data.shape[a];
        const auto s = steps[i];
        auto b = starts[i] < 0 ? starts[i] + size : starts[i];
        auto e = ends[i] < 0 ? ends[i] + size : ends[i];
        if (s > 0) {
            b = std::clamp(b, std::int64_t { 0 }, size);
            e = std::clamp(e, std::int64_t { 0 }, size);
            shape[a] = e > b ? (e - b + s - 1) / s : 0;
        } else {
            b = std::clamp(b, std::int64_t { -1 }, size - 1);
            e = std::clamp(e, std::int64_t { -1 }, size - 1);
            shape[a] = b > e ? (b - e - s - 1) / -s : 0;
        }
        begin[a] = b;
        step[a] = s;
    }
    const auto strides = stridesOf(data.shape);
    FoldedTensor out { shape, data.elemType, {} };
    const auto total = count(shape);
    Dims index(shape.size(), 0);
    for (std::int64_t i = 0; i < total; ++i) {
        std::int64_t at = 0;
        for (std::size_t d = 0; d < shape.size(); ++d)
            at += (begin[d] + index[d] * step[d]) * strides[d];
        out.values.push_back(data.values[static_cast<std::size_t>(at)]);
        for (std::size_t d = shape.size(); d-- > 0;) {
            if (++index[d] < shape[d])
                break;
            index[d] = 0;
        }
    }
    return out;
}

std::optional<FoldedTensor> concat(const onnx::NodeProto& n, const Known& k)
{
    const auto& first = k.at(n.input(0));
    const auto rank = static_cast<std::int64_t>(first.shape.size());
    const auto axis = normalize(attrInt(n, "axis", 0), rank);
    if (axis < 0 || axis >= rank)
        return std::nullopt;
    const auto a = static_cast<std::size_t>(axis);
    Dims shape = first.shape;
    shape[a] = 0;
    for (int i = 0; i < n.input_size(); ++i) {
        const auto& s = k.at(n.input(i)).shape;
        if (s.size() != first.shape.size())
            return std::nullopt;
        for (std::size_t d = 0; d < s.size(); ++d) {
            if (d != a && s[d] != first.shape[d])
                return std::nullopt;
        }
        shape[a] += s[a];
    }
    const auto outer = count(Dims(shape.begin(), shape.begin() + axis));
    FoldedTensor out { shape, first.elemType, {} };
    for (std::int64_t o = 0; o < outer; ++o) {
        for (int i = 0; i < n.input_size(); ++i) {
            const auto& t = k.at(n.input(i));
            const auto block = count(Dims(t.shape.begin() + axis, t.shape.end()));
            out.values.insert(out.values.end(), t.values.begin() + o * block, t.values.begin() + (o + 1) * block);
        }
    }
    return out;
}

std::optional<FoldedTensor> transpose(const onnx::NodeProto& n, const FoldedTensor& x)
{
    const auto rank = x.shape.size();
    auto perm = attrInts(n, "perm").value_or(Dims {});
    if (perm.empty()) {
        for (std::size_t i = rank; i-- > 0;)
            perm.push_back(static_cast<std::int64_t>(i));
    }
    if (perm.size() != rank)
        return std::nullopt;
    Dims shape;
    std::vector<bool> seen(rank, false);
    for (auto p : perm) {
        if (p < 0 || p >= static_cast<std::int64_t>(rank) || seen[static_cast<std::size_t>(p)])
            return std::nullopt; // not a permutation
        seen[static_cast<std::size_t>(p)] = true;
        shape.push_back(x.shape[static_cast<std::size_t>(p)]);
    }
    const auto strides = stridesOf(x.shape);
    FoldedTensor out { shape, x.elemType, {} };
    const auto total = count(shape);
    Dims index(rank, 0);
    for (std::int64_t i = 0; i < total; ++i) {
        std::int64_t at = 0;
        for (std::size_t d = 0; d < rank; ++d)
            at += index[d] * strides[static_cast<std::size_t>(perm[d])];
        out.values.push_back(x.values[static_cast<std::size_t>(at)]);
        for (std::size_t d = rank; d-- > 0;) {
            if (++index[d] < shape[d])
                break;
            index[d] = 0;
        }
    }
    return out;
}

std::optional<FoldedTensor> reshape(const FoldedTensor& x, Dims shape)
{
    std::int64_t known = 1;
    int inferred = -1;
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] == 0 && i < x.shape.size())
            shape[i] = x.shape[i];
        if (shape[i] == -1) {
            if (inferred >= 0)
                return std::nullopt;
            inferred = static_cast<int>(i);
        } else {
            known *= shape[i];
        }
    }
    const auto total = static_cast<std::int64_t>(x.values.size());
    if (inferred >= 0) {
        if (known <= 0 || total % known != 0)
            return std::nullopt;
        shape[static_cast<std::size_t>(inferred)] = total / known;
    }
    if (count(shape) != total)
        return std::nullopt;
    return FoldedTensor { shape, x.elemType, x.values };
}

std::optional<FoldedTensor> trilu(const onnx::NodeProto& n, const Known& k)
{
    const auto& x = k.at(n.input(0));
    if (x.shape.size() < 2)
        return std::nullopt;
    const std::int64_t diagonal = n.input_size() > 1 && !n.input(1).empty() ? k.at(n.input(1)).ints().at(0) : 0;
    const bool upper = attrInt(n, "upper", 1) != 0;
    const auto rows = x.shape[x.shape.size() - 2];
    const auto cols = x.shape.back();
    FoldedTensor out = x;
    for (std::size_t i = 0; i < out.values.size(); ++i) {
        const auto c = static_cast<std::int64_t>(i) % cols;
        const auto r = (static_cast<std::int64_t>(i) / cols) % rows;
        const bool keep = upper ? c - r >= diagonal : c - r <= diagonal;
        if (!keep)
            out.values[i] = 0;
    }
    return out;
}

std::optional<FoldedTensor> scatterNd(const Known& k, const onnx::NodeProto& n)
{
    if (const auto* r = findAttr(n, "reduction"); r != nullptr && r->s() != "none")
        return std::nullopt;
    FoldedTensor out = k.at(n.input(0));
    const auto& idx = k.at(n.input(1));
    const auto& upd = k.at(n.input(2));
    if (idx.shape.empty())
        return std::nullopt;
    const auto depth = idx.shape.back();
    if (depth < 1 || depth > static_cast<std::int64_t>(out.shape.size()))
        return std::nullopt;
    const auto strides = stridesOf(out.shape);
    const auto block = count(Dims(out.shape.begin() + depth, out.shape.end()));
    const auto updates = static_cast<std::int64_t>(idx.values.size()) / depth;
    if (static_cast<std::int64_t>(upd.values.size()) != updates * block)
        return std::nullopt;
    const auto indices = idx.ints();
    for (std::int64_t u = 0; u < updates; ++u) {
        std::int64_t at = 0;
        for (std::int64_t d = 0; d < depth; ++d) {
            const auto size = out.shape[static_cast<std::size_t>(d)];
            const auto i = normalize(indices[static_cast<std::size_t>(u * depth + d)], size);
            if (i < 0 || i >= size)
                return std::nullopt;
            at += i * strides[static_cast<std::size_t>(d)];
        }
        std::copy_n(upd.values.begin() + u * block, block, out.values.begin() + at);
    }
    return out;
}

// NumPy matmul of two folded values (a rotary table's frequencies times positions as an outer
// product); batch dimensions broadcast, a 1-D operand is a row (a) or column (b) dropped after.
std::optional<FoldedTensor> matmul(
    const FoldedTensor& a, const FoldedTensor& b, const std::function<double(double)>& round)
{
    if (a.shape.empty() || b.shape.empty())
        return std::nullopt;
    Dims as = a.shape, bs = b.shape;
    const bool rowA = as.size() == 1, colB = bs.size() == 1;
    if (rowA)
        as.insert(as.begin(), 1);
    if (colB)
        bs.push_back(1);
    const auto m = as[as.size() - 2], k = as.back(), n = bs.back();
    if (bs[bs.size() - 2] != k)
        return std::nullopt;
    const Dims ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
    const auto rank = std::max(ab.size(), bb.size());
    Dims batch(rank, 1);
    for (std::size_t i = 0; i < rank; ++i) {
        const auto da = i + ab.size() >= rank ? ab[i + ab.size() - rank] : 1;
        const auto db = i + bb.size() >= rank ? bb[i + bb.size() - rank] : 1;
        if (da != db && da != 1 && db != 1)
            return std::nullopt;
        batch[i] = da == 1 ? db : da; // NumPy: 1 broadcasts, also against 0
    }
    Dims shape = batch;
    if (!rowA)
        shape.push_back(m);
    if (!colB)
        shape.push_back(n);
    if (count(shape) > kMaxElements || count(batch) * m * n * k > 64 * kMaxElements)
        return std::nullopt;
    // The offset of batch index `flat` in an operand with batch dims `own` (broadcast ones repeat).
    const auto batchOffset = [&batch, rank](std::int64_t flat, const Dims& own, std::int64_t matrix) {
        std::int64_t offset = 0, stride = matrix;
        for (std::size_t i = rank; i-- > 0;) {
            const auto idx = flat % batch[i];
            flat /= batch[i];
            if (i + own.size() >= rank) {
                const auto d = own[i + own.size() - rank];
                offset += (d == 1 ? 0 : idx) * stride;
                stride *= d;
            }
        }
        return offset;
    };
    FoldedTensor out { shape, a.elemType, {} };
    out.values.reserve(static_cast<std::size_t>(count(shape)));
    for (std::int64_t p = 0; p < count(batch); ++p) {
        const auto oa = batchOffset(p, ab, m * k), ob = batchOffset(p, bb, k * n);
        for (std::int64_t i = 0; i < m; ++i) {
            for (std::int64_t j = 0; j < n; ++j) {
                double sum = 0;
                for (std::int64_t q = 0; q < k; ++q)
                    sum = round(sum
                        + round(a.values[static_cast<std::size_t>(oa + i * k + q)]
                            * b.values[static_cast<std::size_t>(ob + q * n + j)]));
                out.values.push_back(sum);
            }
        }
    }
    return out;
}

} // namespace ps::onnximport::folding
