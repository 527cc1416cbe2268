package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// fakeModel answers chat completions with "ok" repeated: as many tokens as
// a tenth of max_tokens (at least one), plus the prompt's estimate, in its
// usage; streamed as server-sent events when asked, with the usage in the
// last chunk.
type fakeModel struct{}

func (fakeModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
		return
	}
	prompt := int64(0)
	for _, m := range req.Messages {
		prompt += int64(len(m.Content)+3) / 4
	}
	n := max(1, req.MaxTokens/10)
	usage := map[string]int64{"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"object":  "chat.completion",
			"choices": []any{map[string]any{"index": 0, "message": map[string]string{"role": "assistant", "content": strings.TrimSpace(strings.Repeat("ok ", int(n)))}}},
			"usage":   usage,
		})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl, _ := w.(http.Flusher)
	for range n {
		b, _ := json.Marshal(map[string]any{"object": "chat.completion.chunk", "choices": []any{map[string]any{"index": 0, "delta": map[string]string{"content": "ok "}}}})
		fmt.Fprintf(w, "data: %s\n\n", b)
		if fl != nil {
			fl.Flush()
		}
	}
	b, _ := json.Marshal(map[string]any{"object": "chat.completion.chunk", "choices": []any{}, "usage": usage})
	fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", b)
}
