#include "views/main_window.h"

#include "graph/graph_summary.h"
#include "models/node_table_model.h"
#include "models/project_session.h"
#include "models/summary_model.h"
#include "ps/config.h"
#include "views/new_model_dialog.h"
#include "views/node_table_view.h"
#include "views/summary_panel.h"

#include <QApplication>
#include <QCloseEvent>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>

namespace ps::gui {
namespace {

    constexpr int kMaxRecentFiles = 8;
    const auto kRecentKey = QStringLiteral("recentFiles");
    const auto kProjectFilter = QStringLiteral("PipeStudio projects (*.pstudio);;All files (*)");

} // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent)
    , m_session(new ProjectSession(this))
    , m_nodeModel(new NodeTableModel(this))
    , m_summaryModel(new SummaryModel(this))
{
    setAcceptDrops(true);
    setupCentralWidget();
    setupFileMenu();
    setupHelpMenu();
    connectSession();
    updateTitle();
    statusBar()->showMessage(tr("Open a project, create one from the model zoo, or drop a .pstudio file here."));
}

void MainWindow::setupCentralWidget()
{
    auto* splitter = new QSplitter(Qt::Horizontal, this);
    m_nodeTable = new NodeTableView(m_nodeModel, splitter);
    m_summaryPanel = new SummaryPanel(m_summaryModel, splitter);
    splitter->addWidget(m_nodeTable);
    splitter->addWidget(m_summaryPanel);
    splitter->setStretchFactor(0, 2);
    splitter->setStretchFactor(1, 1);
    splitter->setSizes({ 1000, 560 });
    setCentralWidget(splitter);
}

void MainWindow::setupFileMenu()
{
    auto* file = menuBar()->addMenu(tr("&File"));
    file->addAction(tr("&New from Model Zoo…"), QKeySequence::New, this, &MainWindow::newFromZoo);
    file->addAction(tr("&Open…"), QKeySequence::Open, this, &MainWindow::openWithDialog);
    m_recentMenu = file->addMenu(tr("Open &Recent"));
    file->addSeparator();
    file->addAction(tr("&Save"), QKeySequence::Save, this, [this] {
        if (m_session->filePath().isEmpty())
            saveAs();
        else
            m_session->save();
    });
    file->addAction(tr("Save &As…"), QKeySequence::SaveAs, this, &MainWindow::saveAs);
    file->addSeparator();
    file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);
    rebuildRecentMenu();
}

void MainWindow::setupHelpMenu()
{
    auto* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&About PipeStudio"), this, [this] {
        QMessageBox::about(this, tr("About PipeStudio"),
            tr("<b>PipeStudio %1</b><p>Plan, simulate and run pipeline-parallel training.</p>")
                .arg(QStringLiteral(PS_VERSION_STRING)));
    });
}

void MainWindow::connectSession()
{
    connect(m_session, &ProjectSession::projectChanged, this, &MainWindow::refreshViews);
    connect(m_session, &ProjectSession::modifiedChanged, this, &MainWindow::updateTitle);
    connect(m_session, &ProjectSession::filePathChanged, this, [this](const QString& path) {
        updateTitle();
        if (!path.isEmpty())
            rememberRecent(path);
    });
    connect(m_session, &ProjectSession::operationFailed, this, &MainWindow::showError);
}

bool MainWindow::openProject(const QString& path)
{
    if (!m_session->open(path))
        return false;
    statusBar()->showMessage(tr("Opened %1").arg(path), 5000);
    return true;
}

void MainWindow::newFromZoo()
{
    NewModelDialog dialog(this);
    if (dialog.exec() == QDialog::Accepted)
        m_session->newFromZoo(dialog.config());
}

void MainWindow::openWithDialog()
{
    const auto path = QFileDialog::getOpenFileName(this, tr("Open project"), QString(), kProjectFilter);
    if (!path.isEmpty())
        openProject(path);
}

void MainWindow::saveAs()
{
    auto path = QFileDialog::getSaveFileName(this, tr("Save project"), m_session->filePath(), kProjectFilter);
    if (path.isEmpty())
        return;
    if (!path.endsWith(QStringLiteral(".pstudio")))
        path += QStringLiteral(".pstudio");
    if (m_session->saveAs(path))
        statusBar()->showMessage(tr("Saved %1").arg(path), 5000);
}

void MainWindow::refreshViews()
{
    const auto graph = m_session->graph();
    m_nodeModel->setGraph(graph);
    m_summaryModel->setSummary(graph ? std::optional(summarizeGraph(*graph)) : std::nullopt);
    updateTitle();
}

void MainWindow::updateTitle()
{
    setWindowTitle(m_session->displayName() + (m_session->isModified() ? QStringLiteral(" *") : QString())
        + QStringLiteral(" — PipeStudio"));
}

QStringList MainWindow::recentFiles() const
{
    return QSettings().value(kRecentKey).toStringList();
}

void MainWindow::rememberRecent(const QString& path)
{
    auto files = recentFiles();
    const auto absolute = QFileInfo(path).absoluteFilePath();
    files.removeAll(absolute);
    files.prepend(absolute);
    while (files.size() > kMaxRecentFiles)
        files.removeLast();
    QSettings().setValue(kRecentKey, files);
    rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu()
{
    m_recentMenu->clear();
    const auto files = recentFiles();
    for (const auto& path : files)
        m_recentMenu->addAction(path, this, [this, path] { openProject(path); });
    m_recentMenu->setEnabled(!files.isEmpty());
}

void MainWindow::showError(const QString& message)
{
    statusBar()->showMessage(message);
    // Non-blocking, so a failed drop or an automated test never waits on a dialog.
    auto* box = new QMessageBox(QMessageBox::Warning, tr("PipeStudio"), message, QMessageBox::Ok, this);
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->open();
}

bool MainWindow::isProjectFile(const QString& path)
{
    return path.endsWith(QStringLiteral(".pstudio"), Qt::CaseInsensitive);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event)
{
    const auto urls = event->mimeData()->urls();
    if (!urls.isEmpty() && urls.front().isLocalFile() && isProjectFile(urls.front().toLocalFile()))
        event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event)
{
    const auto urls = event->mimeData()->urls();
    if (urls.isEmpty() || !urls.front().isLocalFile())
        return;
    event->acceptProposedAction();
    openProject(urls.front().toLocalFile());
}

void MainWindow::closeEvent(QCloseEvent* event)
{
    if (m_session->isModified() && isVisible() && !QApplication::arguments().contains(QStringLiteral("--screenshot"))) {
        const auto answer =
            QMessageBox::question(this, tr("Unsaved project"), tr("The project has unsaved changes. Quit anyway?"));
        if (answer != QMessageBox::Yes) {
            event->ignore();
            return;
        }
    }
    event->accept();
}

} // namespace ps::gui
