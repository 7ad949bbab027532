// The zoo MLP the hand-built traces of the profiler tests are written for: 2 layers of 16,
// 4 classes, micro-batch 4, no dropout (nodes layers.{0,1}.linear.{matmul,bias_add},
// layers.{0,1}.relu, head.matmul, head.bias_add, loss).
#pragma once

#include "zoo/model_config.h"

inline ps::Graph tinyMlp()
{
    auto c = ps::zooPreset("mlp");
    c.layers = 2;
    c.hidden = 16;
    c.vocab = 4;
    c.microBatch = 4;
    c.dropout = 0;
    return ps::buildZooModel(c);
}
