// How many boundary messages can wait at a device, whatever the durations (issue P15: a plan made
// for a memory cap ran out of memory when a receiver's peer ran ahead of the simulated timing).
// The engine's channels copy a message onto its receiver as the sender sends it, so a fast sender
// fills its receiver up to what the schedule's order allows: a message can be there once every
// receiver action it causally depends on is done (vector clocks over an abstract execution of the
// lowered lists), and stays until the action that takes it in. The simulator applies the same
// rule to its timeline; the planner's closed form reads these points.
// Depends on: schedule/schedule.h.
#pragma once

#include "schedule/schedule.h"

#include <vector>

namespace ps {

// During one compute action of a stage: its micro-batches in flight (forward done, input-gradient
// backward not yet, the action's own forward counted), the messages that can be at its device (the
// ones the action takes in included), and under a split backward the micro-batches whose
// input-gradient pass ran and whose weight-gradient pass has not ended (what W reads stays).
struct WaitPoint
{
    int inFlight = 0;
    int forwardMessages = 0; // activations from the previous stage
    int backwardMessages = 0; // gradients from the next stage
    int weightPending = 0; // B (input gradient) done, W not
    friend bool operator==(const WaitPoint&, const WaitPoint&) = default;
};

// Per stage, the points of its compute actions no other point of the stage dominates, for a
// chain schedule (each send to the next or previous stage; lowered here when not yet). Throws
// ps::Error if the lists deadlock.
[[nodiscard]] std::vector<std::vector<WaitPoint>> messageWaitPoints(const Schedule& schedule);

} // namespace ps
