// A test with an empty scratch folder of its own (m_dir: <tmp>/ps_<pid>_<suite>_<test>), made before
// each test and removed after it; shared by the store, profiler and end-to-end tests. A fixture
// that overrides SetUp calls ScratchTest::SetUp() first.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <unistd.h>

namespace ps::test {

class ScratchTest : public ::testing::Test
{
protected:
    void SetUp() override
    {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        m_dir = std::filesystem::temp_directory_path()
            / ("ps_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
        std::filesystem::remove_all(m_dir);
        std::filesystem::create_directories(m_dir);
    }
    void TearDown() override
    {
        std::filesystem::remove_all(m_dir);
    }
    // A path in the test's scratch folder.
    [[nodiscard]] std::string file(const std::string& name) const
    {
        return (m_dir / name).string();
    }
    std::filesystem::path m_dir;
};

} // namespace ps::test
