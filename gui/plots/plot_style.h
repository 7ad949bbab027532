// Colours by meaning, shared by every plot (issue P20): the same forward, backward, recompute,
// swap, optimizer and send shades in the partition editor, the stage balance, the timelines and
// the histogram; memory parts; the capacity and over-capacity red; the scale-out plots' curves.
// Depends on: Qt Gui only.
#pragma once

#include <QColor>

namespace ps::gui::palette {

inline const QColor forward { 79, 163, 224 };
inline const QColor backward { 240, 160, 60 };
inline const QColor recompute { 150, 100, 200 };
inline const QColor swap { 200, 60, 60 }; // copies to and from host memory, swap stalls
inline const QColor optimizer { 60, 60, 60 };
inline const QColor send { 150, 150, 150 };
inline const QColor capacity { 200, 40, 40 }; // a device's memory capacity, and what goes over it
inline const QColor stageMemory { 120, 60, 160 }; // a stage's memory as its nodes accumulate
// Memory parts, darkest first as they stack: parameters, gradients, optimizer states; then
// activations (the backward's colour: what the backward reads) and workspace.
inline const QColor parameters { 70, 110, 170 };
inline const QColor gradients { 110, 160, 210 };
inline const QColor optimizerStates { 160, 200, 230 };
inline const QColor activations = backward;
inline const QColor workspace { 180, 180, 180 };
// Measured against predicted (monitor, scale-out): measured blue, predicted orange.
inline const QColor measured { 30, 100, 180 };
inline const QColor predicted { 240, 140, 40 };
// Scale-out (throughput against memory per GPU, both predicted): TFLOP/s in the compute blue of the
// forward pass, memory per GPU in the stage-memory purple.
inline const QColor throughput = forward;
inline const QColor memoryPerDevice = stageMemory;

} // namespace ps::gui::palette
