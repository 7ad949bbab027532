// What the index-kernel tests share (kernels_index_test.cpp, kernels_index_grad_test.cpp): pooling
// and resize attributes, and a fixture with integer, counting and well-separated inputs and a
// finite-difference gradient check.
#pragma once

#include "backend.h"
#include "kernel_test_support.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace ps::engine::testing {

inline Attributes pool(Shape kernel, Shape strides, Shape pads, std::int64_t ceil, std::int64_t includePad = 0)
{
    return { { "kernel", std::move(kernel) }, { "strides", std::move(strides) }, { "pads", std::move(pads) },
        { "ceil_mode", ceil }, { "count_include_pad", includePad } };
}

inline Attributes resize(Shape sizes, std::string mode, std::string coord, std::string nearest = "floor")
{
    return { { "sizes", std::move(sizes) }, { "mode", std::move(mode) },
        { "coordinate_transformation_mode", std::move(coord) }, { "nearest_mode", std::move(nearest) } };
}

inline double valueAt(const NdArray& a, std::int64_t i)
{
    return a.dtype() == DType::F32 ? static_cast<double>(a.f32()[i]) : static_cast<double>(a.i64()[i]);
}

inline void expectValues(const NdArray& a, const std::vector<double>& expect, double tolerance, const std::string& what)
{
    ASSERT_EQ(a.numel(), static_cast<std::int64_t>(expect.size())) << what << ": " << formatShape(a.shape());
    for (std::int64_t i = 0; i < a.numel(); ++i)
        EXPECT_NEAR(valueAt(a, i), expect[static_cast<std::size_t>(i)], tolerance) << what << " element " << i;
}

class IndexKernel : public ps::engine::testing::KernelTest
{
protected:
    NdArray ints(Shape shape, const std::vector<std::int64_t>& values)
    {
        return indices(std::move(shape), values);
    }
    NdArray iota(Shape shape, float first = 1.0F)
    {
        auto a = NdArray::empty(m_alloc, std::move(shape));
        for (std::int64_t i = 0; i < a.numel(); ++i)
            a.f32()[i] = first + static_cast<float>(i);
        return a;
    }
    // Shuffled values 0.1 apart: no two within a finite-difference step (max and top-k stay put).
    NdArray distinct(Shape shape)
    {
        auto a = NdArray::empty(m_alloc, std::move(shape));
        std::vector<float> v(static_cast<std::size_t>(a.numel()));
        for (std::size_t i = 0; i < v.size(); ++i)
            v[i] = 0.1F * static_cast<float>(i) - 0.05F * static_cast<float>(v.size());
        std::shuffle(v.begin(), v.end(), m_data);
        std::copy(v.begin(), v.end(), a.f32());
        return a;
    }

    std::vector<NdArray> run(const Node& n, const std::vector<NdArray>& in, NodeValues* keep = nullptr)
    {
        NodeValues v;
        auto out = forward(n, in, v);
        if (keep != nullptr)
            *keep = std::move(v);
        return out;
    }

    void checkGrad(const Node& n, const std::vector<NdArray>& in, const std::vector<bool>& differentiable,
        const std::string& label, double tolerance = 1e-2)
    {
        SCOPED_TRACE(label);
        checkGradients(n, in, differentiable, tolerance, "", true);
    }
};

} // namespace ps::engine::testing
