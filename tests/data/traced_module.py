"""A language model written as users write them, for PipeStudio's tracer (profiler/python/
pipestudio_trace.py): an embedding tied to the output head (the head reads it transposed, which the
TorchScript exporter folds into a second initializer), a frozen projection (requires_grad=False), a
registered float buffer the forward multiplies by, a float buffer holding -inf (a mask's fill), and a trainable Linear on 3-D activations (whose
weight the exporter stores transposed under a new name). Only the tracer's metadata tells the
importer which of the file's nine initializers torch trains."""
import torch
from torch import nn


class TiedLm(nn.Module):
    def __init__(self, vocab=50, d=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.frozen = nn.Linear(d, d)
        for p in self.frozen.parameters():
            p.requires_grad_(False)
        self.fc = nn.Linear(d, d)
        self.ln = nn.LayerNorm(d)
        self.register_buffer("gain", torch.linspace(0.5, 1.5, d))
        self.register_buffer("floor", torch.tensor([float("-inf"), 0.0]))
        with torch.no_grad():  # distinct values: the exporter would merge equal initializers
            self.ln.weight.normal_(1.0, 0.1)
            self.ln.bias.normal_(0.0, 0.1)

    def forward(self, idx):
        x = torch.maximum(self.fc(self.frozen(self.wte(idx)) * self.gain), self.floor.max())
        return self.ln(x) @ self.wte.weight.t()


def tied_lm():
    torch.manual_seed(7)
    return TiedLm()
