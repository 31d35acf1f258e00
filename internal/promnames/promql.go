package promnames

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// PromQL words that are never metric names. Keywords and aggregation
// operators are matched case-insensitively, as PromQL does.
var (
	keywords = set("and", "or", "unless", "atan2", "bool", "offset", "by", "without",
		"on", "ignoring", "group_left", "group_right", "inf", "nan")
	// aggregations may be followed by a "by (...)" or "without (...)"
	// clause before their parentheses, so they are not always followed by "(".
	aggregations = set("sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
		"count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio")
	// labelLists are followed by a parenthesised list of label names.
	labelLists = set("by", "without", "on", "ignoring", "group_left", "group_right")
)

func set(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

func identStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == ':'
}

func identChar(c byte) bool { return identStart(c) || c >= '0' && c <= '9' }

// InExpression returns the metric names a PromQL expression selects, in
// order of first appearance, each once: every identifier that is not a
// function, keyword, aggregation operator, label name (inside {...} or a
// by / without / on / ignoring / group_left / group_right list) or part of
// a duration, number or string; plus names given as {__name__="..."}.
// Grafana template variables ($var, ${var}, [[var]]) are skipped. It does
// not validate the expression.
func InExpression(expr string) []string {
	var names []string
	add := func(n string) {
		if n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	s := expr
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '#': // comment to the end of the line
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			i = skipString(s, i)
		case c == '{':
			end := matching(s, i, '{', '}')
			if n := nameMatcher(s[i+1 : end]); n != "" {
				add(n)
			}
			i = end + 1
		case c == '[':
			if strings.HasPrefix(s[i:], "[[") { // Grafana's old [[var]]
				j := strings.Index(s[i:], "]]")
				if j < 0 {
					return names
				}
				i += j + 2
				continue
			}
			i = matching(s, i, '[', ']') + 1
		case c == '$':
			i++
			if i < len(s) && s[i] == '{' {
				i = matching(s, i, '{', '}') + 1
				continue
			}
			for i < len(s) && identChar(s[i]) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			// numbers, hex, exponents and durations (5m, 1h30m, 1e3, 0x1f)
			for i < len(s) && (identChar(s[i]) || s[i] == '.') {
				i++
			}
		case identStart(c):
			j := i
			for j < len(s) && identChar(s[j]) {
				j++
			}
			word := s[i:j]
			lower := strings.ToLower(word)
			k := skipSpace(s, j)
			nextParen := k < len(s) && s[k] == '('
			switch {
			case labelLists[lower]:
				if nextParen {
					j = matching(s, k, '(', ')') + 1
				}
			case keywords[lower], aggregations[lower]:
			case nextParen: // a function call
			default:
				add(word)
			}
			i = j
		default:
			if c >= utf8.RuneSelf {
				_, n := utf8.DecodeRuneInString(s[i:])
				i += n
				continue
			}
			i++
		}
	}
	return names
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string literal starting at i.
func skipString(s string, i int) int {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1
		}
	}
	return len(s)
}

// matching returns the index of the bracket closing the one at i (or the
// end of s), skipping string literals and nested brackets.
func matching(s string, i int, open, closing byte) int {
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '"', '\'', '`':
			j = skipString(s, j) - 1
		case open:
			depth++
		case closing:
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return len(s)
}

// nameMatcher returns the value of an equality __name__ matcher in the body
// of a {...} selector.
func nameMatcher(body string) string {
	for _, part := range splitMatchers(body) {
		part = strings.TrimSpace(part)
		rest, ok := strings.CutPrefix(part, "__name__")
		if !ok {
			continue
		}
		rest = strings.TrimSpace(rest)
		if !strings.HasPrefix(rest, "=") || strings.HasPrefix(rest, "=~") {
			continue
		}
		v := strings.TrimSpace(rest[1:])
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'' || v[0] == '`') && v[len(v)-1] == v[0] {
			return v[1 : len(v)-1]
		}
	}
	return ""
}

// splitMatchers splits a selector body at the commas outside strings.
func splitMatchers(body string) []string {
	var parts []string
	start := 0
	for j := 0; j < len(body); j++ {
		switch body[j] {
		case '"', '\'', '`':
			j = skipString(body, j) - 1
		case ',':
			parts = append(parts, body[start:j])
			start = j + 1
		}
	}
	return append(parts, body[start:])
}
