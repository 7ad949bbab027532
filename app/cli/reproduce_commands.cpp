// `pipestudio reproduce`: each paper's headline results re-created beside the paper's numbers, as a
// Markdown report with PNG figures drawn by the app's own plotting (core/report/reproduction.h).
#include "cli/commands.h"
#include "ps/config.h"
#include "report/reproduction.h"
#include "util/error.h"

#include <fmt/core.h>

#include <filesystem>
#include <fstream>

namespace ps::app {
namespace {

    struct ReproduceCommandOptions
    {
        std::string paper = "all";
        std::string output = "reproduction";
        bool quick = false;
    };

    int reproduceCommand(const ReproduceCommandOptions& o, const FigureRenderer& render)
    {
        namespace fs = std::filesystem;
        // Before the (long) work: an output that cannot be a directory fails now, not after it.
        std::error_code ec;
        fs::create_directories(o.output, ec);
        if (ec || !fs::is_directory(o.output))
            throw Error("--output '" + o.output + "': cannot create the report directory ("
                + (ec ? ec.message() : std::string("not a directory")) + ")");
        std::vector<std::string> papers;
        if (o.paper == "all")
            papers = reproduciblePapers();
        else
            papers = { o.paper };
        ReproduceOptions options;
        options.quick = o.quick;
        options.progress = [](const std::string& line) {
            fmt::print(stderr, "{}\n", line);
            std::fflush(stderr);
        };
        std::vector<PaperReport> reports;
        std::vector<ReportFigure> figures;
        for (const auto& p : papers) {
            reports.push_back(reproducePaper(p, options));
            figures.insert(figures.end(), reports.back().figures.begin(), reports.back().figures.end());
        }
        auto markdown = reportMarkdown(reports, std::string("pipestudio ") + PS_VERSION_STRING);
        std::string error;
        if (!render)
            markdown += "\n(This build has no GUI, so the figures were not drawn.)\n";
        else if (!render(figures, o.output, error))
            throw Error("cannot draw the report's figures: " + error);
        // Written whole to a temporary name, then renamed: a failed run leaves no half report.
        const auto path = fs::path(o.output) / "README.md";
        const auto temporary = fs::path(o.output) / ".README.md.partial";
        {
            std::ofstream out(temporary, std::ios::binary);
            out << markdown;
            if (!out)
                throw Error("cannot write '" + temporary.string() + "'");
        }
        fs::rename(temporary, path);
        fmt::print(
            "Wrote {} ({} paper(s), {} figure(s))\n", path.string(), reports.size(), render ? figures.size() : 0);
        return 0;
    }

} // namespace

void addReproduceCommand(CLI::App& app, Action& action, const FigureRenderer& render)
{
    auto o = std::make_shared<ReproduceCommandOptions>();
    auto* cmd = app.add_subcommand("reproduce",
        "Re-create the papers' headline tables and figures beside the papers' numbers (Markdown + PNG report)");
    std::vector<std::string> choices = reproduciblePapers();
    choices.emplace_back("all");
    cmd->add_option("--paper", o->paper, "Which paper: " + CLI::detail::join(choices, ", "))
        ->check(CLI::IsMember(choices));
    cmd->add_option("-o,--output", o->output, "Report directory (README.md and the PNGs)");
    cmd->add_flag("--quick", o->quick, "Fewer models and stage counts (a first look; the tests use it)");
    cmd->callback([&action, o, render] { action = [o, render] { return reproduceCommand(*o, render); }; });
}

} // namespace ps::app
