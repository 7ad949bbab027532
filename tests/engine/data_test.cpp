// Token data: text as bytes, uint16/uint32 token files, windows with next-token labels, and errors
// that name the file.
#include "data.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <unistd.h>

using namespace ps;
using namespace ps::engine;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name)
{
    const auto dir = fs::temp_directory_path() / ("ps_data_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    return dir / name;
}

// `g` with the Embedding that reads `input` given a table of its own with `rows` rows (an
// nn.Transformer wrapper's separate source and target embeddings).
Graph withOwnTable(const Graph& g, const std::string& input, std::int64_t rows)
{
    Graph out(g.info());
    for (const auto& t : g.tensors()) {
        auto copy = t;
        copy.producer = NodeId();
        out.addTensor(std::move(copy));
    }
    Tensor table;
    table.name = input + "_table";
    table.kind = TensorKind::Parameter;
    for (const auto& n : g.nodes()) {
        auto copy = n;
        if (n.op == OpType::Embedding && g.tensor(n.inputs[0]).name == input) {
            table.shape = { rows, g.tensor(n.inputs[1]).shape[1] };
            copy.inputs[1] = out.addTensor(table);
        }
        out.addNode(std::move(copy));
    }
    out.setOutputs(g.outputs());
    return out;
}

} // namespace

TEST(TokenData, TextBytesAndNextTokenLabels)
{
    const auto p = scratch("t.txt");
    std::ofstream(p) << "abcdefgh";
    const auto d = TokenData::fromTextFile(p);
    EXPECT_EQ(d.vocab(), 256);
    EXPECT_EQ(d.size(), 8);
    std::mt19937_64 rng(1);
    std::int64_t ids[2 * 4];
    std::int64_t labels[2 * 4];
    d.sample(rng, 2, 4, ids, labels);
    for (int b = 0; b < 2; ++b) {
        for (int t = 0; t < 4; ++t) {
            EXPECT_GE(ids[b * 4 + t], 'a');
            EXPECT_EQ(labels[b * 4 + t], ids[b * 4 + t] + 1); // consecutive letters: the next byte
        }
    }
    EXPECT_THROW(d.sample(rng, 1, 8, ids, labels), Error); // a window needs seq + 1 tokens
}

TEST(TokenData, Uint16AndUint32Files)
{
    const auto p16 = scratch("t.u16");
    {
        std::ofstream out(p16, std::ios::binary);
        for (std::uint16_t t : { 1, 300, 65535 })
            out.write(reinterpret_cast<const char*>(&t), 2);
    }
    const auto d = TokenData::fromTokenFile(p16, 2, 65536);
    EXPECT_EQ(d.size(), 3);
    std::mt19937_64 rng(1);
    std::int64_t ids[2];
    std::int64_t labels[2];
    d.sample(rng, 1, 2, ids, labels);
    EXPECT_EQ(ids[0], 1);
    EXPECT_EQ(ids[1], 300);
    EXPECT_EQ(labels[1], 65535);
    try {
        (void)TokenData::fromTokenFile(p16, 2, 1000);
        FAIL() << "expected a vocabulary error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("t.u16"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("65535"), std::string::npos) << e.what();
    }
    const auto p32 = scratch("t.u32");
    {
        std::ofstream out(p32, std::ios::binary);
        for (std::uint32_t t : { 70000U, 5U })
            out.write(reinterpret_cast<const char*>(&t), 4);
        out.write("x", 1); // a torn last token
    }
    EXPECT_THROW((void)TokenData::fromTokenFile(p32, 4, 100000), Error);
    EXPECT_THROW((void)TokenData::fromTextFile(scratch("missing.txt")), Error);
    fs::remove_all(p16.parent_path());
}

TEST(TokenData, DefaultCorpusIsDebiansLicenses)
{
    if (!fs::is_directory("/usr/share/common-licenses"))
        GTEST_SKIP() << "not a Debian system";
    const auto d = TokenData::defaultCorpus();
    EXPECT_GT(d.size(), 100000);
    EXPECT_NE(d.source().find("common-licenses"), std::string::npos);
}

TEST(BatchSource, BertTokensGoToTheVocabularyTableNotTheTokenTypes)
{
    // BERT has two (B, T) int inputs read by tables: input_ids (the vocabulary) and token_type_ids
    // (2 rows). The data's tokens belong in the first; the second gets ids within its 2 rows.
    auto c = zooPreset("bert-base");
    c.layers = 1;
    c.hidden = 32;
    c.heads = 2;
    c.seq = 16;
    c.vocab = 300;
    c.microBatch = 2;
    const auto graph = buildZooModel(c);
    BatchSource source(graph, TokenData::random(256, 1 << 12, 3), 7);
    EXPECT_TRUE(source.samplesTokens());
    const auto batch = source.next();
    bool sawIds = false;
    for (const auto& [name, values] : batch.inputs) {
        const auto top = *std::max_element(values.begin(), values.end());
        if (name == "input_ids") {
            sawIds = true;
            EXPECT_LT(top, 256);
            EXPECT_GT(top, 1) << "token ids drawn from the data, not from the 2 token types";
        } else if (name == "token_type_ids") {
            EXPECT_LT(top, 2);
        }
    }
    EXPECT_TRUE(sawIds);
}

TEST(BatchSource, AnEncoderDecoderReadsTheTextBeforeTheWindowItsDecoderContinues)
{
    // T5: input_ids (the encoder's) and decoder_input_ids read the one vocabulary table. The
    // decoder's ids are the windows and the labels their next tokens; the encoder's are the
    // tokens just before each window (a prefix language model on the text).
    auto c = zooPreset("t5-small");
    c.layers = 1;
    c.hidden = 32;
    c.heads = 2;
    c.seq = 12;
    c.decoderSeq = 8;
    c.vocab = 300;
    c.microBatch = 3;
    const auto graph = buildZooModel(c);
    // A text whose bytes are their own positions mod 256: each window says where it came from.
    const auto file = std::filesystem::temp_directory_path() / ("ps_positions_" + std::to_string(::getpid()));
    {
        std::ofstream out(file, std::ios::binary);
        for (int i = 0; i < 4096; ++i)
            out.put(static_cast<char>(i % 256));
    }
    BatchSource source(graph, TokenData::fromTextFile(file), 11);
    std::filesystem::remove(file);
    EXPECT_NE(source.describe().find("input_ids: the 12 tokens before each window"), std::string::npos)
        << source.describe();
    // Equal lengths (the zoo's default): both inputs are shaped as the labels, and of the two over
    // the shared table the later, the decoder's, takes the windows.
    auto same = c;
    same.decoderSeq = 12;
    BatchSource tie(buildZooModel(same), TokenData::random(256, 1 << 12, 5), 3);
    EXPECT_NE(tie.describe().find("input_ids: the 12 tokens before each window"), std::string::npos) << tie.describe();
    // Separate tables of equal size (nn.Transformer's source and target embeddings): the decoder's
    // ids are the ones that reach the logits row for row (the encoder's reach them only through
    // cross-attention's keys and values), whichever input comes first. An encoder table smaller
    // than the text's vocabulary gets random ids of its own range.
    const auto untied = withOwnTable(buildZooModel(same), "input_ids", 300);
    BatchSource own(untied, TokenData::random(256, 1 << 12, 5), 3);
    EXPECT_NE(own.describe().find("input_ids: the 12 tokens before each window"), std::string::npos) << own.describe();
    const auto small = withOwnTable(buildZooModel(same), "input_ids", 100);
    BatchSource smaller(small, TokenData::random(256, 1 << 12, 5), 3);
    EXPECT_EQ(smaller.describe(), "token windows of random tokens"); // no encoder context
    for (const auto& [name, values] : smaller.next().inputs) {
        if (name == "input_ids") {
            EXPECT_LT(*std::max_element(values.begin(), values.end()), 100) << name;
        }
    }
    const auto batch = source.next();
    std::map<std::string, std::vector<std::int64_t>> by;
    for (const auto& [name, values] : batch.inputs)
        by[name] = values;
    ASSERT_EQ(by["input_ids"].size(), 3U * 12);
    ASSERT_EQ(by["decoder_input_ids"].size(), 3U * 8);
    ASSERT_EQ(by["labels"].size(), 3U * 8);
    for (int b = 0; b < 3; ++b) {
        const auto first = by["decoder_input_ids"][static_cast<std::size_t>(b * 8)];
        for (int t = 0; t < 8; ++t) {
            EXPECT_EQ(by["decoder_input_ids"][static_cast<std::size_t>(b * 8 + t)], (first + t) % 256);
            EXPECT_EQ(by["labels"][static_cast<std::size_t>(b * 8 + t)], (first + t + 1) % 256);
        }
        for (int t = 0; t < 12; ++t) // the 12 tokens before the decoder's window
            EXPECT_EQ(by["input_ids"][static_cast<std::size_t>(b * 12 + t)], (first - 12 + t + 256) % 256);
    }
}
