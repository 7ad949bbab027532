// GoogleTest main for GUI tests: a QApplication on the offscreen platform with settings kept
// out of the user's real configuration.
#include <QApplication>
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
    QApplication::setApplicationName(QStringLiteral("gui_tests"));
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
