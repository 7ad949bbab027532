#include "app_launcher.h"

#include "models/project_session.h"
#include "views/main_window.h"

#include <QApplication>
#include <QIcon>
#include <QPixmap>
#include <QTimer>

namespace ps::gui {
namespace {

    bool loadInitial(MainWindow& window, const GuiOptions& options, std::string& error)
    {
        QString message;
        QObject::connect(
            window.session(), &ProjectSession::operationFailed, &window, [&message](const QString& m) { message = m; });
        bool ok = true;
        if (!options.project.empty())
            ok = window.openProject(QString::fromStdString(options.project));
        else if (!options.model.empty()) {
            try {
                ok = window.session()->newFromZoo(zooPreset(options.model));
            } catch (const std::exception& e) {
                message = QString::fromStdString(e.what());
                ok = false;
            }
        }
        error = message.toStdString();
        return ok;
    }

} // namespace

bool renderScreenshot(const GuiOptions& options, std::string& error)
{
    MainWindow window;
    if (!loadInitial(window, options, error))
        return false;
    window.resize(options.width, options.height);
    window.show();
    // Let layouts settle and QCustomPlot's queued replot run before grabbing.
    for (int i = 0; i < 5; ++i)
        QApplication::processEvents();
    const auto pixmap = window.grab();
    if (!pixmap.save(QString::fromStdString(options.screenshot), "PNG")) {
        error = "cannot write screenshot '" + options.screenshot + "'";
        return false;
    }
    return true;
}

int runApplication(int argc, char** argv, const GuiOptions& options)
{
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("PipeStudio"));
    QApplication::setApplicationName(QStringLiteral("PipeStudio"));
    QApplication::setWindowIcon(QIcon(QStringLiteral(":/icons/pipestudio.svg")));
    if (!options.screenshot.empty()) {
        std::string error;
        if (!renderScreenshot(options, error)) {
            qWarning("pipestudio: error: %s", error.c_str());
            return 1;
        }
        return 0;
    }
    MainWindow window;
    std::string error;
    loadInitial(window, options, error); // errors are shown in the window
    window.resize(options.width, options.height);
    window.show();
    return QApplication::exec();
}

} // namespace ps::gui
