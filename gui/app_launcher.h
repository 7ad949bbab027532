// Entry point of the desktop application, called by app/main.cpp. No Qt types in this header so
// the app can include it without the gui target's compile definitions.
#pragma once

#include "report/reproduction.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ps::gui {

struct GuiOptions
{
    std::string project; // .pstudio to open on start
    std::string model; // or a zoo model to open on start
    std::string screenshot; // render the window to this PNG, then quit
    int width = 1600;
    int height = 1000;
    // main | editor | balance | timeline | plans | search | cluster | launch | monitor | compare | import
    std::string view = "main";
    double microBatch = 0; // 0: the model's
    std::int64_t plan = 0; // with --screenshot and a project: a stored plan applied first (0: none)
    std::string onnx; // with --view import: the ONNX file whose import dialog is rendered
};

int runApplication(int argc, char** argv, const GuiOptions& options);

// Renders `figures` as PNGs into `directory` (offscreen when there is no display); false with
// `error` set when one cannot be written.
bool renderFigures(
    int argc, char** argv, const std::vector<ReportFigure>& figures, const std::string& directory, std::string& error);

// Renders `window`-sized screenshot of a main window showing `options` (used by the docs and tests).
bool renderScreenshot(const GuiOptions& options, std::string& error);

} // namespace ps::gui
