#include "views/main_window.h"

#include "graph/graph_summary.h"
#include "models/node_table_model.h"
#include "models/plan_session.h"
#include "models/plans_model.h"
#include "models/project_session.h"
#include "models/run_launcher.h"
#include "models/run_monitor_model.h"
#include "models/runs_model.h"
#include "models/stage_balance_model.h"
#include "models/summary_model.h"
#include "plots/partition_editor_plot.h"
#include "plots/stage_balance_plot.h"
#include "plots/timeline_plot.h"
#include "ps/config.h"
#include "views/auto_search_dialog.h"
#include "views/cluster_dock.h"
#include "views/monitor_dock.h"
#include "views/new_model_dialog.h"
#include "views/node_table_view.h"
#include "views/onnx_import_dialog.h"
#include "views/plans_panel.h"
#include "views/profile_dock.h"
#include "views/scale_dialog.h"
#include "views/summary_panel.h"

#include <QApplication>
#include <QCloseEvent>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QInputDialog>
#include <QItemSelectionModel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QScrollArea>
#include <QSettings>
#include <QSortFilterProxyModel>
#include <QStatusBar>
#include <QTableView>
#include <QToolBar>
#include <QUndoStack>
#include <QVBoxLayout>

#include <memory>

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
    , m_planSession(new PlanSession(this))
    , m_balanceModel(new StageBalanceModel(m_planSession, this))
    , m_plansModel(new PlansModel(this))
{
    setAcceptDrops(true);
    setupCentralWidget();
    setupDocks();
    setupRunDocks();
    setupFileMenu();
    setupPlanMenu();
    setupRunMenu();
    setupProfileMenu();
    setupViewMenu();
    setupHelpMenu();
    setupBackgroundWork();
    connectSession();
    connectSelection();
    restoreLayout();
    updateTitle();
    statusBar()->showMessage(tr("Open a project, create one from the model zoo, or drop a .pstudio file here."));
}

void MainWindow::setupCentralWidget()
{
    m_editor = new PartitionEditorPlot(m_planSession, this);
    setCentralWidget(m_editor);
}

void MainWindow::setupDocks()
{
    setDockNestingEnabled(true);
    const auto dock = [this](const QString& title, QWidget* content, Qt::DockWidgetArea area) {
        auto* d = new QDockWidget(title, this);
        d->setObjectName(title);
        d->setWidget(content);
        addDockWidget(area, d);
        return d;
    };
    m_nodeTable = new NodeTableView(m_nodeModel, this);
    m_summaryPanel = new SummaryPanel(m_summaryModel, this);
    m_clusterDock = new ClusterDock(m_planSession, this);
    auto* nodes = dock(tr("Nodes"), m_nodeTable, Qt::LeftDockWidgetArea);
    tabifyDockWidget(nodes, dock(tr("Summary"), m_summaryPanel, Qt::LeftDockWidgetArea));
    // The cluster form with its across-nodes section is taller than a docked panel: it scrolls.
    auto* clusterScroll = new QScrollArea(this);
    clusterScroll->setWidgetResizable(true);
    clusterScroll->setWidget(m_clusterDock);
    tabifyDockWidget(nodes, dock(tr("Cluster"), clusterScroll, Qt::LeftDockWidgetArea));
    nodes->raise();

    auto* balance = new QWidget(this);
    auto* balanceLayout = new QVBoxLayout(balance);
    balanceLayout->setContentsMargins(0, 0, 0, 0);
    m_balancePlot = new StageBalancePlot(m_balanceModel, balance);
    auto* balanceTable = new QTableView(balance);
    balanceTable->setModel(m_balanceModel);
    balanceTable->verticalHeader()->setVisible(false);
    balanceLayout->addWidget(m_balancePlot, 3);
    balanceLayout->addWidget(balanceTable, 2);
    m_plansPanel = new PlansPanel(m_planSession, m_plansModel, this);
    auto* balanceDock = dock(tr("Stage balance"), balance, Qt::RightDockWidgetArea);
    tabifyDockWidget(balanceDock, dock(tr("Plans"), m_plansPanel, Qt::RightDockWidgetArea));
    balanceDock->raise();
    m_timeline = new TimelinePlot(m_planSession, this);
    auto* timelineDock = dock(tr("Timeline and memory"), m_timeline, Qt::BottomDockWidgetArea);
    resizeDocks({ nodes, balanceDock }, { 420, 560 }, Qt::Horizontal);
    resizeDocks({ timelineDock }, { 300 }, Qt::Vertical);
    connect(m_plansPanel, &PlansPanel::message, this, [this](const QString& m) { statusBar()->showMessage(m, 8000); });
}

void MainWindow::setupPlanMenu()
{
    auto* undo = m_planSession->undoStack()->createUndoAction(this, tr("&Undo"));
    undo->setShortcut(QKeySequence::Undo);
    auto* redo = m_planSession->undoStack()->createRedoAction(this, tr("&Redo"));
    redo->setShortcut(QKeySequence::Redo);
    auto* edit = menuBar()->addMenu(tr("&Edit"));
    edit->addAction(undo);
    edit->addAction(redo);
    auto* plan = menuBar()->addMenu(tr("&Plan"));
    auto* add = plan->addAction(tr("&Add stage"), m_planSession, &PlanSession::addStage);
    auto* remove = plan->addAction(
        tr("&Remove selected boundary"), this, [this] { m_planSession->removeStage(m_editor->selectedBoundary()); });
    auto* search = plan->addAction(tr("Auto-&search…"), this, &MainWindow::openAutoSearch);
    plan->addAction(
        tr("Save plan…"), this, [this] { m_plansPanel->saveCurrent(tr("plan %1").arg(m_plansModel->rowCount() + 1)); });
    plan->addAction(tr("Scale &out…"), this, &MainWindow::openScaleOut);
    auto* toolbar = addToolBar(tr("Plan"));
    toolbar->setObjectName(QStringLiteral("planToolbar"));
    // The stack's actions name the command ("Undo Move boundary 3 to node 41"): on the toolbar,
    // fixed words, the command in the tooltip, so the buttons keep their width.
    const auto fixedWords = [this](const QString& text, QAction* source) {
        auto* a = new QAction(text, this);
        const auto sync = [a, source] {
            a->setEnabled(source->isEnabled());
            a->setToolTip(QString(source->text()).remove(QLatin1Char('&')));
        };
        sync();
        connect(source, &QAction::changed, a, sync);
        connect(a, &QAction::triggered, source, &QAction::trigger);
        return a;
    };
    for (auto* a : { fixedWords(tr("Undo"), undo), fixedWords(tr("Redo"), redo), add, remove, search })
        toolbar->addAction(a);
}

void MainWindow::connectSelection()
{
    // Node table -> editor: show where the selected node is.
    connect(m_nodeTable->table()->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
        [this](const QModelIndex& current) {
            if (current.isValid())
                m_editor->showNode(current.data(NodeTableModel::NodeIdRole).toInt());
        });
    // Editor -> node table: select the clicked node.
    connect(m_editor, &PartitionEditorPlot::nodeClicked, this, [this](int node) {
        const auto source = m_nodeModel->index(node, 0);
        const auto proxied = m_nodeTable->proxy()->mapFromSource(source);
        if (proxied.isValid()) {
            m_nodeTable->table()->selectRow(proxied.row());
            m_nodeTable->table()->scrollTo(proxied);
        }
    });
    connect(m_planSession, &PlanSession::operationFailed, this, &MainWindow::showError);
}

void MainWindow::openScaleOut()
{
    const auto graph = m_planSession->graph();
    const auto model = graph ? gptShapeOf(*graph) : std::nullopt;
    if (!model) {
        showError(tr("Scale out plans GPT decoders across nodes: open a zoo GPT-2 model first."));
        return;
    }
    auto* dialog = new ScaleDialog(*model, this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    dialog->search();
    dialog->show();
}

void MainWindow::openAutoSearch()
{
    if (!m_planSession->hasPlan()) {
        showError(tr("Open a model first."));
        return;
    }
    auto* dialog = new AutoSearchDialog(m_planSession, this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    connect(dialog, &AutoSearchDialog::searchFailed, this,
        [this](const QString& m) { showError(tr("Auto-search failed: %1").arg(m)); });
    dialog->resize(900, 700);
    dialog->open();
}

void MainWindow::setupFileMenu()
{
    auto* file = menuBar()->addMenu(tr("&File"));
    file->addAction(tr("&New from Model Zoo…"), QKeySequence::New, this, &MainWindow::newFromZoo);
    file->addAction(tr("&Open…"), QKeySequence::Open, this, &MainWindow::openWithDialog);
    file->addAction(tr("&Import ONNX…"), this, &MainWindow::importWithDialog);
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
    setupExportMenu(file);
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
        m_plansModel->setProject(path);
        m_runsModel->setProject(path);
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
        newFromZooInBackground(dialog.config());
}

void MainWindow::openWithDialog()
{
    const auto path = QFileDialog::getOpenFileName(this, tr("Open project"), QString(), kProjectFilter);
    if (!path.isEmpty())
        openProjectInBackground(path);
}

void MainWindow::importWithDialog()
{
    const auto path = QFileDialog::getOpenFileName(
        this, tr("Import ONNX model"), QString(), tr("ONNX models (*.onnx);;All files (*)"));
    if (path.isEmpty())
        return;
    // One dialog: every input dimension, dynamic or fixed at its exported size, the sizes to import
    // at (a fixed one other than the exported size re-specialises the graph), the loss, the weights,
    // and a live preview of the import.
    std::unique_ptr<OnnxImportDialog> dialog;
    try {
        dialog = std::make_unique<OnnxImportDialog>(path, this);
    } catch (const std::exception& e) {
        QMessageBox::warning(this, tr("Import ONNX"), QString::fromStdString(e.what()));
        return;
    }
    if (dialog->exec() == QDialog::Accepted)
        importOnnxInBackground(path, dialog->options(), dialog->loss());
}

bool MainWindow::importOnnx(const QString& path, std::int64_t batch, std::int64_t sequence)
{
    QString summary;
    if (!m_session->importOnnx(path, batch, sequence, &summary))
        return false;
    statusBar()->showMessage(summary);
    return true;
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
    auto setup = m_planSession->setup();
    m_planSession->setStoredProfiles(m_session->storedProfiles());
    const auto& stored = m_session->storedProfiles();
    if (std::none_of(stored.begin(), stored.end(), [&](const Profile& p) { return p.source == setup.profileSource; }))
        setup.profileSource = "analytical"; // the new project has no such profile
    m_planSession->setModel(graph, setup);
    m_plansModel->setProject(m_session->filePath());
    m_runsModel->setProject(m_session->filePath());
    const auto measured =
        std::find_if(stored.begin(), stored.end(), [](const Profile& p) { return p.source == "measured-cpu"; });
    m_profileDock->showComparison(graph, measured == stored.end() ? nullptr : &*measured,
        m_planSession->hasPlan() ? m_planSession->editor().microBatch() : 1.0);
    if (!m_runsModel->markedInterrupted().empty())
        statusBar()->showMessage(
            tr("%n run(s) left running by a process that no longer exists are now marked interrupted.", nullptr,
                static_cast<int>(m_runsModel->markedInterrupted().size())),
            10000);
    updateTitle();
}

void MainWindow::updateTitle()
{
    QString running;
    if (m_launcher->isRunning() && m_monitorModel->runId() > 0)
        running = tr("[training run %1: %2] ").arg(m_monitorModel->runId()).arg(m_monitor->progressText());
    else if (m_launcher->isRunning())
        running = tr("[starting training] ");
    setWindowTitle(running + m_session->displayName() + (m_session->isModified() ? QStringLiteral(" *") : QString())
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
        m_recentMenu->addAction(path, this, [this, path] { openProjectInBackground(path); });
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

bool MainWindow::isOnnxFile(const QString& path)
{
    return path.endsWith(QStringLiteral(".onnx"), Qt::CaseInsensitive);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event)
{
    const auto urls = event->mimeData()->urls();
    if (!urls.isEmpty() && urls.front().isLocalFile()
        && (isProjectFile(urls.front().toLocalFile()) || isOnnxFile(urls.front().toLocalFile())))
        event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event)
{
    const auto urls = event->mimeData()->urls();
    if (urls.isEmpty() || !urls.front().isLocalFile())
        return;
    event->acceptProposedAction();
    const auto path = urls.front().toLocalFile();
    if (isOnnxFile(path))
        importOnnxInBackground(path); // exported sizes (dynamic: batch 1, sequence 128); File > Import ONNX asks
    else
        openProjectInBackground(path);
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
    QSettings().setValue(QStringLiteral("window/geometry"), saveGeometry());
    QSettings().setValue(QStringLiteral("window/state"), saveState());
    event->accept();
}

} // namespace ps::gui
