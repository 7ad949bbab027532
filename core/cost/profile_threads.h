// CPU profiles measured at several BLAS thread counts, and the one a plan or run with a given
// number of threads per device should use (issue P15: a profile measured on both cores predicted a
// two-device run, whose devices have one core each, 21% short). Depends on: cost/profile.h,
// store/project_store.h.
#pragma once

#include "cost/profile.h"
#include "store/project_store.h"

#include <optional>
#include <string>
#include <vector>

namespace ps {

struct MatchedProfile
{
    Profile profile;
    std::string note; // which measurement it is, and why (empty where there was nothing to choose)
};

// From `candidates` (one device kind and source, one per thread count), the profile for devices
// running `threads` BLAS threads each: the one measured at that count; else, per node, the line
// time(t) = serial + parallel / t through the measured counts on either side of it (else the two
// nearest; Amdahl's law, each
// of forward, backward and weight-gradient time, at every micro-batch size); else the only one, with
// a note that it does not match. threads <= 0 (a GPU) or no recorded count: the one measured with
// the most threads. nullopt when `candidates` is empty.
[[nodiscard]] std::optional<MatchedProfile> matchProfileThreads(const std::vector<Profile>& candidates, int threads);

// matchProfileThreads over every thread count `store` holds for (deviceKind, source).
[[nodiscard]] std::optional<MatchedProfile> loadMatchedProfile(
    const ProjectStore& store, const std::string& deviceKind, const std::string& source, int threads);

} // namespace ps
