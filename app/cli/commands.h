// Internal to the CLI: each subcommand registers its options and its action with CLI11.
#pragma once

#include "report/reproduction.h"

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace ps::app {

// The action to run after parsing; returns the process exit code.
using Action = std::function<int()>;

void addNewCommand(CLI::App& app, Action& action);
void addInfoCommand(CLI::App& app, Action& action);
void addImportCommand(CLI::App& app, Action& action);
void addZooCommand(CLI::App& app, Action& action);
void addDevicesCommand(CLI::App& app, Action& action);
void addDemoCommand(CLI::App& app, Action& action);
void addEstimateCommand(CLI::App& app, Action& action);
void addGemmCheckCommand(CLI::App& app, Action& action);
void addScaleCommand(CLI::App& app, Action& action);
void addCalibrateCommand(CLI::App& app, Action& action);
void addSimulateCommand(CLI::App& app, Action& action);
void addPlanCommand(CLI::App& app, Action& action);
void addSearchCommand(CLI::App& app, Action& action);
void addGroupingCommand(CLI::App& app, Action& action);
void addMaxBatchCommand(CLI::App& app, Action& action);
void addMaxModelCommand(CLI::App& app, Action& action);
void addTrainCommand(CLI::App& app, Action& action);
void addCompareCommand(CLI::App& app, Action& action);
void addProfileCommand(CLI::App& app, Action& action);
void addExportCommand(CLI::App& app, Action& action);
void addImportTraceCommand(CLI::App& app, Action& action);
void addTraceCommand(CLI::App& app, Action& action); // registered by addTrainCommand, after `train`
// Draws report figures as PNGs into a directory; empty in builds without the GUI.
using FigureRenderer =
    std::function<bool(const std::vector<ReportFigure>& figures, const std::string& directory, std::string& error)>;
void addReproduceCommand(CLI::App& app, Action& action, const FigureRenderer& render);

// Runs the headless end-to-end demo; also what `pipestudio` does without a display.
int runDemo(const std::string& directory);

} // namespace ps::app
