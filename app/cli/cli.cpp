#include "cli/cli.h"

#include "cli/commands.h"
#include "ps/config.h"
#include "util/error.h"

#include <fmt/core.h>

#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

namespace ps::app {
namespace {

    bool displayAvailable()
    {
        return std::getenv("DISPLAY") || std::getenv("WAYLAND_DISPLAY") || std::getenv("QT_QPA_PLATFORM");
    }

    void addGuiCommand(
        CLI::App& app, Action& action, GuiRequest& request, const std::function<int(const GuiRequest&)>& launchGui)
    {
        auto* cmd = app.add_subcommand("gui",
            "Open the desktop application (with neither a project nor a recent one: the example project, "
            "gpt2-tiny planned on this CPU, ready for Run > Launch)");
        cmd->add_option("project", request.project, "Project file (.pstudio) to open")->check(CLI::ExistingFile);
        cmd->add_option("--model", request.model, "Open a zoo model instead of a project");
        cmd->add_option("--screenshot", request.screenshot,
            "Render the window (or the --view) to a PNG and quit; with no project or --model, of the example "
            "project");
        cmd->add_option("--width", request.width, "Window width (and the --screenshot's)")
            ->check(CLI::Range(320, 8192));
        cmd->add_option("--height", request.height, "Window height (and the --screenshot's)")
            ->check(CLI::Range(240, 8192));
        cmd->add_option("--view", request.view,
               "With --screenshot, what to render: main (the window), editor, balance, timeline, plans, search "
               "(an auto-search), cluster, launch (the launch dialog), monitor (the newest run's curves), compare "
               "(its predicted vs measured timeline), import (File > Import ONNX's preview of --onnx), scale (Plan > "
               "Scale out on 256 A100s, global batch 1024; a GPT-2 model); launch needs a project, monitor and compare "
               "one with a training run")
            ->check(CLI::IsMember(std::vector<std::string> { "main", "editor", "balance", "timeline", "plans", "search",
                "cluster", "launch", "monitor", "compare", "import", "scale" }));
        cmd->add_option("--onnx", request.onnx, "With --view import: the ONNX model whose import dialog is shown")
            ->check(CLI::ExistingFile);
        cmd->add_option(
            "--micro-batch", request.microBatch, "With --screenshot: the micro-batch size of the plan shown");
        cmd->add_option("--plan", request.plan,
               "With --screenshot and a project: the stored plan with this id in the editor first (its schedule, "
               "micro-batch, cuts and, for Mixed-pipe, its stage-to-device map); ids from `pipestudio plan --json`")
            ->check(CLI::Range(std::int64_t { 1 }, std::numeric_limits<std::int64_t>::max()));
        cmd->callback([&action, &request, launchGui] {
            action = [&request, launchGui] {
                if (!launchGui)
                    throw Error("this build has no GUI (configure with PS_BUILD_GUI=ON and Qt 6 installed)");
                return launchGui(request);
            };
        });
    }

} // namespace

int runCli(int argc, char** argv, const std::function<int(const GuiRequest&)>& launchGui,
    const std::function<bool(const std::vector<ReportFigure>&, const std::string&, std::string&)>& renderFigures)
{
    CLI::App app { "PipeStudio: plan, simulate and run pipeline-parallel training.\n"
                   "Without a subcommand: the GUI when a display is available, else the headless demo.",
        "pipestudio" };
    app.set_version_flag("--version", std::string("pipestudio ") + PS_VERSION_STRING);
    app.require_subcommand(0, 1);
    // One line a script can show as it is: what was wrong, and where to look.
    app.failure_message([](const CLI::App* parsed, const CLI::Error& e) {
        const auto subcommands = parsed->get_subcommands();
        const auto help = subcommands.empty() ? std::string() : subcommands.front()->get_name() + " ";
        return fmt::format("pipestudio: error: {} (see `pipestudio {}--help`)\n", e.what(), help);
    });
    Action action;
    GuiRequest request;
    addNewCommand(app, action);
    addInfoCommand(app, action);
    addImportCommand(app, action);
    addZooCommand(app, action);
    addDevicesCommand(app, action);
    addDemoCommand(app, action);
    addEstimateCommand(app, action);
    addGemmCheckCommand(app, action);
    addCalibrateCommand(app, action);
    addSimulateCommand(app, action);
    addPlanCommand(app, action);
    addSearchCommand(app, action);
    addGroupingCommand(app, action);
    addMaxBatchCommand(app, action);
    addMaxModelCommand(app, action);
    addScaleCommand(app, action);
    addTrainCommand(app, action);
    addCompareCommand(app, action);
    addProfileCommand(app, action);
    addExportCommand(app, action);
    addImportTraceCommand(app, action);
    addReproduceCommand(app, action, renderFigures);
    addGuiCommand(app, action, request, launchGui);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    try {
        if (action)
            return action();
        if (launchGui && displayAvailable())
            return launchGui(request);
        fmt::print("No display found: running the headless demo (`pipestudio --help` lists the commands).\n\n");
        return runDemo(std::filesystem::temp_directory_path() / "pipestudio-demo");
    } catch (const std::exception& e) {
        fmt::print(stderr, "pipestudio: error: {}\n", e.what());
        return 1;
    }
}

} // namespace ps::app
