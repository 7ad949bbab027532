// The GUI's names for the engine's run prediction (engine/runtime/run_prediction.h), the one
// `pipestudio compare` prints.
#pragma once

#include "runtime/run_prediction.h"

namespace ps::gui {

using engine::ActionDifference;
using engine::deviceLabel;
using engine::DeviceOverflow;
using engine::largestActionDifferences;
using engine::overflowMessage;
using engine::predictRun;
using engine::predictStoredRun;
using engine::RunPrediction;
using engine::RunShape;
using engine::shapeFromPlanJson;
using engine::shapeFromRun;
using engine::thisCpu;

} // namespace ps::gui
