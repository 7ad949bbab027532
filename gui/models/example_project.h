// The first-start example: gpt2-tiny planned as a 2-stage 1F1B pipeline with 2 micro-batches on
// this machine's CPU, stored with that plan, so a new user can open Run > Launch and train it on
// two CPU devices at once.
#pragma once

#include "models/plan_session.h"
#include "models/project_session.h"

#include <QString>

namespace ps::gui {

// QStandardPaths::AppDataLocation/example.pstudio.
[[nodiscard]] QString exampleProjectPath();
// The editor's setup for the example: this machine's CPU, 2 stages, 1F1B, 2 micro-batches.
[[nodiscard]] PlanSetup examplePlanSetup();
// Writes the example to `path` unless a file is there, then reads it. Touches no session, so it
// runs on a worker thread; throws with a message naming the file when it cannot.
[[nodiscard]] LoadedProject openOrCreateExample(const QString& path);

} // namespace ps::gui
