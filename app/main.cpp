// pipestudio: the desktop GUI when started without a subcommand (and a display), otherwise the
// headless CLI that runs every GUI flow.
#include "cli/cli.h"
#include "ps/config.h"

#if PS_HAVE_GUI
#include "app_launcher.h"
#endif

int main(int argc, char** argv)
{
#if PS_HAVE_GUI
    const auto launch = [argc, argv](const ps::app::GuiRequest& request) {
        return ps::gui::runApplication(argc, argv,
            { request.project, request.model, request.screenshot, request.width, request.height, request.view,
                request.microBatch, request.plan, request.onnx });
    };
    const auto render = [argc, argv](const std::vector<ps::ReportFigure>& figures, const std::string& directory,
                            std::string& error) {
        return ps::gui::renderFigures(argc, argv, figures, directory, error);
    };
    return ps::app::runCli(argc, argv, launch, render);
#else
    return ps::app::runCli(argc, argv, {});
#endif
}
