// Helpers shared by the libFuzzer targets: the importers under test read files, so each input is
// written to a per-process temporary file first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <unistd.h>

namespace ps::fuzz {

// A temporary file holding one fuzz input, removed (with SQLite's -wal/-shm/-journal companions)
// when the input is done.
class InputFile
{
public:
    InputFile(const std::uint8_t* data, std::size_t size, std::string_view extension)
        : m_path(
            std::filesystem::temp_directory_path() / ("ps_fuzz_" + std::to_string(::getpid()) + std::string(extension)))
    {
        removeAll();
        std::ofstream(m_path, std::ios::binary)
            .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    }
    InputFile(const InputFile&) = delete;
    InputFile& operator=(const InputFile&) = delete;
    ~InputFile()
    {
        removeAll();
    }
    [[nodiscard]] const std::filesystem::path& path() const
    {
        return m_path;
    }

private:
    void removeAll() const
    {
        std::error_code ec;
        for (const char* suffix : { "", "-wal", "-shm", "-journal" })
            std::filesystem::remove(m_path.string() + suffix, ec);
    }
    std::filesystem::path m_path;
};

inline std::string_view asText(const std::uint8_t* data, std::size_t size)
{
    return { reinterpret_cast<const char*>(data), size };
}

} // namespace ps::fuzz
