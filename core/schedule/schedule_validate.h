// Proves a schedule is complete and can run: every stage does each micro-batch's F and B (or B
// and W) exactly once on its own device, in dependency order, every send has its receive, and an
// abstract execution (any durations) finishes instead of deadlocking.
#pragma once

#include "schedule/schedule.h"

#include <string>
#include <vector>

namespace ps {

// Problems found, most fundamental first; empty when the schedule is valid.
[[nodiscard]] std::vector<std::string> validateSchedule(const Schedule& schedule);
// Throws ps::Error with the first problem.
void validateScheduleOrThrow(const Schedule& schedule);

// Import/export in PyTorch pipelining's custom-schedule CSV: one row per rank, one action per
// cell ("0F1", "1I0", "0SEND_F2"; empty cells are idle). Throws naming the row and cell.
[[nodiscard]] std::string scheduleToCsv(const Schedule& schedule);
[[nodiscard]] Schedule scheduleFromCsv(std::string_view csv, const std::string& source);

} // namespace ps
