// GoogleTest main for GUI tests: a QApplication on the offscreen platform with settings kept
// out of the user's real configuration, and out of the other test processes' (CTest runs each
// test as its own process, several at once: a shared settings file let one test's saved window
// layout reach another's), removed when the process ends.
#include <QApplication>
#include <QFile>
#include <QSettings>
#include <QStandardPaths>

#include <gtest/gtest.h>

int main(int argc, char** argv)
{
    // gtest_discover_tests runs this at build time, outside CTest's ENVIRONMENT.
    if (!qEnvironmentVariableIsSet("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    QStandardPaths::setTestModeEnabled(true);
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("PipeStudioTests"));
    QApplication::setApplicationName(QStringLiteral("gui_tests-%1").arg(QApplication::applicationPid()));
    ::testing::InitGoogleTest(&argc, argv);
    const int result = RUN_ALL_TESTS();
    const auto settings = QSettings().fileName();
    QFile::remove(settings);
    return result;
}
