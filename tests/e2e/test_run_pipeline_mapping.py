"""Unit tests of the exported runner's name mapping (resources/export/run_pipeline.py), run by
cli_e2e_tests (ExportRunner.MapsScopesOntoTheFxGraph) with PS_RUNNER_DIR pointing at the runner."""
import os
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.environ.get("PS_RUNNER_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "resources",
                                                                 "export")))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_pipeline as rp  # noqa: E402
from export_gpt import TinyGPT, export_onnx  # noqa: E402


def onnx_scope(name):
    """What PipeStudio's importer makes of an ONNX node name: '/h.0/mlp/mlp.0/MatMul' -> 'h.0.mlp.mlp.0'."""
    parts = [p for p in name.split("/") if p]
    return ".".join(parts[:-1]) if len(parts) > 1 else ""


class Mapping(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.model = TinyGPT()
        self.gm = rp.trace(self.model)
        self.nodes = {n.name: n for n in self.gm.graph.nodes}

    def test_canonical_scope_matches_core(self):
        self.assertEqual(rp.canonical_scope("h.0.mlp.mlp.0"), "h.0.mlp.0")
        self.assertEqual(rp.canonical_scope("h.0.mlp.0"), "h.0.mlp.0")
        self.assertEqual(rp.canonical_scope("block.block.block.0"), rp.canonical_scope("block.block.0"))
        self.assertEqual(rp.canonical_scope(""), "")

    def test_tracer_records_module_scopes(self):
        self.assertEqual(self.nodes["h_0_attn_c_attn"].meta["ps_scope"], "h.0.attn.c_attn")
        self.assertEqual(self.nodes["softmax"].meta["ps_scope"], "h.0.attn")
        self.assertEqual(self.nodes["add_1"].meta["ps_scope"], "h.0")  # the residual add in Block.forward
        self.assertEqual(self.nodes["add"].meta["ps_scope"], "")

    def test_parameter_and_constant_nodes_are_not_data_dependent(self):
        dynamic = rp.data_dependent(self.gm.graph)
        self.assertIn(self.nodes["wte"], dynamic)
        self.assertNotIn(self.nodes["wpe"], dynamic)  # an embedding of a constant range: ONNX folds it
        self.assertNotIn(self.nodes["pos"], dynamic)

    def test_runs_and_fallback_anchors(self):
        runs = rp.scope_runs(self.gm.graph)
        order = list(self.gm.graph.nodes)
        self.assertEqual(order[runs[("h.1.ln_1", 0)]].name, "h_1_ln_1")
        self.assertEqual(order[runs[("h.0", 1)]].name, "add_2")  # h.0's second run: the MLP residual
        cut = {"stage": 1, "node": "n", "scope": "s",
               "anchors": [{"scope": "missing", "occurrence": 0}, {"scope": "h.2.ln_1", "occurrence": 0}]}
        positions, used = rp.map_cuts(self.gm.graph, [cut])
        self.assertEqual(order[positions[0]].name, "h_2_ln_1")
        self.assertEqual(used[0]["scope"], "h.2.ln_1")
        with self.assertRaises(SystemExit):  # cuts must move forward
            rp.map_cuts(self.gm.graph, [cut, dict(cut, stage=2)])

    def test_every_onnx_scope_is_an_fx_scope(self):
        import onnx
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "gpt.onnx")
            export_onnx(path)
            names = [n.name for n in onnx.load(path).graph.node if n.op_type not in ("Constant", "Identity")]
        fx_scopes = {rp.canonical_scope(n.meta["ps_scope"]) for n in self.gm.graph.nodes}
        onnx_scopes = {rp.canonical_scope(onnx_scope(n)) for n in names}
        self.assertTrue(onnx_scopes <= fx_scopes, onnx_scopes - fx_scopes)
        self.assertIn("h.0.mlp.0", onnx_scopes)

    def test_split_pipeline_computes_the_model(self):
        for anchor in ({"scope": "h.2.ln_1", "occurrence": 0}, {"scope": "h.1.attn", "occurrence": 0}):
            cut = {"stage": 1, "node": "n", "scope": "s", "anchors": [anchor]}
            positions, _ = rp.map_cuts(self.gm.graph, [cut])
            pipeline = rp.Pipeline(self.gm, rp.assign_stages(self.gm.graph, positions), 2)
            idx = torch.randint(0, 64, (2, 16))
            env = {pipeline.placeholders[0]: idx}
            for s in range(2):
                pipeline.run_stage(s, env, checkpointed=(s == 0))
            torch.testing.assert_close(pipeline.model_output(env), self.model(idx))
            self.assertGreaterEqual(len(pipeline.incoming[1]), 1)


if __name__ == "__main__":
    unittest.main()
