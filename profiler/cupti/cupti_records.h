// CUPTI's activity records (cupti_activity.h of CUDA 13: CUpti_ActivityKernel10,
// CUpti_ActivityMemcpy6, CUpti_ActivityMemset4, CUpti_ActivityExternalCorrelation) into the
// header-free form of activity.h. Only the struct layouts are used: no CUPTI function is called, so
// this compiles wherever the header is (PS_HAVE_CUPTI_HEADERS) and is tested with records built in
// the test. The collector (cuptiActivityGetNextRecord over completed buffers) hands each record here.
// Depends on: cupti_activity.h (header only), cupti/activity.h.
#pragma once

#include "cupti/activity.h"

#include <cupti_activity.h>

namespace ps::profiler::cupti {

// Appends `record` to `batch` when it is a kind the attribution reads (concurrent kernel, kernel,
// memcpy, memset, external correlation); false for any other kind.
// `record` points at a record in a CUPTI buffer (cuptiActivityGetNextRecord), of the size its kind has.
bool appendRecord(const CUpti_Activity* record, ActivityBatch& batch);

} // namespace ps::profiler::cupti
