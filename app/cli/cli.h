// The headless command-line twin of every GUI flow: `pipestudio <subcommand> ...`.
#pragma once

#include "report/reproduction.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace ps::app {

struct GuiRequest
{
    std::string project; // .pstudio to open, may be empty
    std::string model; // zoo model to open instead, may be empty
    std::string screenshot; // render the main window to this PNG and quit
    int width = 1600;
    int height = 1000;
    std::string view = "main";
    double microBatch = 0;
    std::int64_t plan = 0; // with a project: a stored plan applied to the editor first (0: none)
    std::string onnx; // --view import: the ONNX file previewed
};

// Parses argv and runs a subcommand. When the command asks for the GUI (no subcommand with a
// display, or `gui`), `launchGui` is called; it is empty in builds without the GUI.
// `renderFigures` draws `reproduce`'s figures (empty without the GUI).
int runCli(int argc, char** argv, const std::function<int(const GuiRequest&)>& launchGui,
    const std::function<bool(const std::vector<ReportFigure>&, const std::string&, std::string&)>& renderFigures = {});

} // namespace ps::app
