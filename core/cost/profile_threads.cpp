#include "cost/profile_threads.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace ps {
namespace {

    // value(t) = serial + parallel / t through (ta, a) and (tb, b), at micro-batches 1 and 16 (a
    // time is never negative there), and the line through those two.
    LinearModel amdahl(const LinearModel& a, int ta, const LinearModel& b, int tb, int t)
    {
        const double ia = 1.0 / ta;
        const double ib = 1.0 / tb;
        const double it = 1.0 / t;
        const auto at = [&](double mb) {
            const double va = a.at(mb);
            const double parallel = (va - b.at(mb)) / (ia - ib);
            return std::max(0.0, va + parallel * (it - ia));
        };
        return LinearModel::through(1, at(1), 16, at(16));
    }

    Profile fitted(const Profile& a, const Profile& b, int threads)
    {
        Profile out = a;
        out.threads = threads;
        for (std::size_t n = 0; n < out.nodes.size() && n < b.nodes.size(); ++n) {
            auto& o = out.nodes[n];
            const auto& x = a.nodes[n];
            const auto& y = b.nodes[n];
            o.forwardNs = amdahl(x.forwardNs, a.threads, y.forwardNs, b.threads, threads);
            o.backwardNs = amdahl(x.backwardNs, a.threads, y.backwardNs, b.threads, threads);
            o.weightGradNs = amdahl(x.weightGradNs, a.threads, y.weightGradNs, b.threads, threads);
        }
        return out;
    }

    std::string perDevice(int threads)
    {
        return std::to_string(threads) + (threads == 1 ? " thread" : " threads") + " per device";
    }

} // namespace

std::optional<MatchedProfile> matchProfileThreads(const std::vector<Profile>& candidates, int threads)
{
    if (candidates.empty())
        return std::nullopt;
    std::vector<const Profile*> recorded;
    const Profile* most = &candidates.front();
    for (const auto& p : candidates) {
        if (p.threads > 0)
            recorded.push_back(&p);
        if (p.threads > most->threads)
            most = &p;
    }
    if (threads <= 0)
        return MatchedProfile { *most, "" };
    if (recorded.empty())
        return MatchedProfile { *most,
            "measured with a thread count the project did not record; `pipestudio profile` again to match the "
            "run's "
                + perDevice(threads) };
    for (const auto* p : recorded) {
        if (p->threads == threads)
            return MatchedProfile { *p, "measured with " + perDevice(threads) + ", as the devices run" };
    }
    if (recorded.size() == 1)
        return MatchedProfile { *recorded.front(),
            "measured with " + perDevice(recorded.front()->threads) + "; the devices run " + std::to_string(threads)
                + " each (profile with --threads " + std::to_string(threads) + " to match)" };
    // The measured counts on either side of `threads` where there are such, else the two nearest.
    std::stable_sort(recorded.begin(), recorded.end(), [threads](const Profile* x, const Profile* y) {
        return std::abs(x->threads - threads) < std::abs(y->threads - threads);
    });
    const auto* a = recorded[0];
    const auto* b = recorded[1];
    for (const auto* p : recorded) {
        if ((p->threads < threads) != (a->threads < threads)) {
            b = p;
            break;
        }
    }
    return MatchedProfile { fitted(*a, *b, threads),
        "fitted to " + perDevice(threads) + " from the profiles measured with " + std::to_string(a->threads) + " and "
            + std::to_string(b->threads) + " (per node, time = serial + parallel / threads)" };
}

std::optional<MatchedProfile> loadMatchedProfile(
    const ProjectStore& store, const std::string& deviceKind, const std::string& source, int threads)
{
    std::vector<Profile> candidates;
    for (const int t : store.profileThreads(deviceKind, source)) {
        if (auto p = store.loadProfile(deviceKind, source, t))
            candidates.push_back(std::move(*p));
    }
    return matchProfileThreads(candidates, threads);
}

} // namespace ps
