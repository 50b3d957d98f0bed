package main

import (
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/toolmodel"
)

func init() { subcommands = append(subcommands, newModelCmd) }

func newModelCmd(g *globals) *cobra.Command {
	model := commandGroup("model", "Make arbiter's own small tool-calling model: its training corpus and its GGUF file")
	var cfg toolmodel.CorpusConfig
	var out string
	corpus := &cobra.Command{
		Use:   "corpus --out DIR",
		Short: "Write the tool-calling model's training corpus, tokenized as the engine tokenizes prompts",
		Long: `Write the conversations the tool-calling model learns from: tool-call agent sessions
and long-context sessions (the workloads' own scripts, under a seed of their own), held by
a model that calls the asked-for tool with the request's words and answers from the
tool's result, rendered with the model's chat template and tokenized with its vocabulary
as llama.cpp tokenizes a prompt. DIR receives tokens.u16, learn.u8, docs.u64, vocab.json
and corpus.json, which toolmodel/train.py reads.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := toolmodel.NewVocab()
			if err != nil {
				return err
			}
			sum, err := toolmodel.WriteCorpus(out, cfg, v, runtime.GOMAXPROCS(0))
			if err != nil {
				return err
			}
			if g.json {
				return json.NewEncoder(g.stdout).Encode(sum)
			}
			fmt.Fprintf(g.stdout, "%d conversations, %d tokens (%d learned), longest %d, vocabulary %d tokens; %d dropped as longer than %d\n",
				sum.Docs, sum.Tokens, sum.LearnedTokens, sum.LongestDoc, sum.VocabSize, sum.Dropped, cfg.MaxTokens)
			return nil
		},
	}
	corpus.Flags().StringVar(&out, "out", "", "folder to write the corpus into (required)")
	corpus.Flags().Int64Var(&cfg.Seed, "seed", 20261206, "seed of the conversations (keep it apart from the seeds specs use)")
	corpus.Flags().IntVar(&cfg.Conversations, "conversations", 30000, "conversations to write")
	corpus.Flags().IntVar(&cfg.MaxEstimate, "max-context", 27000, "largest context of the long-context conversations, in the workload's estimate (four characters a token)")
	corpus.Flags().IntVar(&cfg.MaxTokens, "max-tokens", 20480, "drop a conversation of more tokens than this")
	_ = corpus.MarkFlagRequired("out")

	var checkpoint, corpusDir, name string
	ggufCmd := &cobra.Command{
		Use:   "gguf --checkpoint FILE --corpus DIR --out FILE",
		Short: "Write a trained checkpoint (safetensors) as a GGUF file ollama serves",
		Long: `Write the checkpoint toolmodel/train.py saved (safetensors, tensors named as GGUF names
them) as a GGUF file: matrices F16, norms F32, the vocabulary of the corpus it was trained
on. The same checkpoint gives the same bytes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := toolmodel.WriteGGUF(out, checkpoint, corpusDir, name); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "wrote %s\n", out)
			return nil
		},
	}
	ggufCmd.Flags().StringVar(&checkpoint, "checkpoint", "", "the trained checkpoint, safetensors (required)")
	ggufCmd.Flags().StringVar(&corpusDir, "corpus", "", "the corpus folder it was trained on, for its vocab.json (required)")
	ggufCmd.Flags().StringVar(&out, "out", "", "the GGUF file to write (required)")
	ggufCmd.Flags().StringVar(&name, "name", "arbiter-toolcall", "the model's general.name")
	for _, f := range []string{"checkpoint", "corpus", "out"} {
		_ = ggufCmd.MarkFlagRequired(f)
	}
	model.AddCommand(corpus, ggufCmd)
	return model
}
