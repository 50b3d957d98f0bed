package main

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/plugins"
)

func TestFindWord(t *testing.T) {
	tests := []struct {
		s    string
		at   int
		want bool
	}{
		{"forbidden", 0, true},
		{"This is Forbidden.", 8, true},
		{"ünï forbidden", 4, true},
		{"unforbidden forbiddens forbidden_x", 0, false},
		{"forbiddenforbidden forbidden", 19, true},
		{"", 0, false},
	}
	for _, tt := range tests {
		at, ok := findWord(tt.s, "forbidden")
		if ok != tt.want || (ok && at != tt.at) {
			t.Errorf("findWord(%q) = %d, %v; want %d, %v", tt.s, at, ok, tt.at, tt.want)
		}
	}
}

func TestContainsWordLabels(t *testing.T) {
	d := containsWord{word: "wedged"}
	r := plugins.Response{Completion: openai.ChatCompletion{Choices: []openai.Choice{
		{Message: openai.Message{Content: "fine"}},
		{Message: openai.Message{Content: "it is wedged"}},
	}}}
	l, err := d.Detect(context.Background(), r)
	if err != nil || l != (plugins.Label{Detector: "contains-word", Corrupted: true, Reason: `choice 1 content contains "wedged" at rune 6`}) {
		t.Errorf("label = %+v, %v", l, err)
	}
}

func FuzzFindWord(f *testing.F) {
	f.Add("This is Forbidden.", "forbidden")
	f.Add("ǅ forbidden", "forbidden")
	f.Fuzz(func(t *testing.T, s, word string) {
		word = strings.ToLower(word)
		if word == "" {
			return
		}
		at, ok := findWord(s, word)
		if !ok {
			return
		}
		lower := strings.ToLower(s)
		if at > utf8.RuneCountInString(lower) || !strings.Contains(lower, word) {
			t.Fatalf("findWord(%q, %q) = %d", s, word, at)
		}
	})
}
