#pragma once
// A per-tensor map for one call of the memory model's graph walks (op_cost.cpp, weight_pass.cpp).

#include "ids.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ps::detail {

// A per-tensor map for one call, cleared in O(1) by a generation stamp: planners ask for
// thousands of ranges of graphs with tens of thousands of tensors.
class TensorScratch
{
public:
    TensorScratch(std::size_t slot, std::size_t tensors)
        : m_pool(pools()[slot])
    {
        if (m_pool.stamp.size() < tensors) {
            m_pool.stamp.assign(tensors, 0);
            m_pool.value.assign(tensors, 0);
            m_pool.generation = 0;
        }
        if (++m_pool.generation == 0) { // wrapped: stale stamps could match again
            std::fill(m_pool.stamp.begin(), m_pool.stamp.end(), 0);
            m_pool.generation = 1;
        }
    }
    [[nodiscard]] bool contains(TensorId t) const
    {
        return m_pool.stamp[t.index()] == m_pool.generation;
    }
    [[nodiscard]] std::size_t at(TensorId t) const
    {
        return m_pool.value[t.index()];
    }
    // False (and no change) when `t` is there already.
    bool insert(TensorId t, std::size_t value)
    {
        if (contains(t))
            return false;
        m_pool.stamp[t.index()] = m_pool.generation;
        m_pool.value[t.index()] = value;
        return true;
    }
    void erase(TensorId t)
    {
        m_pool.stamp[t.index()] = 0;
    }

private:
    struct Pool
    {
        std::vector<std::uint32_t> stamp;
        std::vector<std::size_t> value;
        std::uint32_t generation = 0;
    };
    static std::array<Pool, 3>& pools()
    {
        thread_local std::array<Pool, 3> p;
        return p;
    }
    Pool& m_pool;
};

} // namespace ps::detail
