// Reference renderings of Ollama Modelfile templates, made by Go's own text/template.
//
// Writes go/expected/<template>/<case>.txt for every template and case in go/manifest.json. The
// data and the execution rules are Ollama's (template/template.go): messages collated, the
// `.Messages` mode or the legacy per-turn System/Prompt/Response mode cut after `.Response`,
// `missingkey=zero`, the `json`/`currentDate`/`yesterdayDate`/`toTypeScriptType` functions, tool
// schemas and call arguments that print as JSON. Only the Go standard library is used.
//
// Usage: go run engine/tests/data/templates/reference/render_go.go
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"text/template"
	"text/template/parse"
	"time"
)

// The instant every test renders at: 2024-07-26 14:05:09 UTC.
var now = time.Date(2024, 7, 26, 14, 5, 9, 0, time.UTC)

type Args map[string]any

func (a Args) String() string { b, _ := json.Marshal(a); return string(b) }

type ToolCallFunction struct {
	Index     int
	Name      string
	Arguments Args
}

type ToolCall struct {
	ID       string
	Function ToolCallFunction
}

type Message struct {
	Role       string
	Content    string
	Thinking   string
	Images     []string
	ToolCalls  []ToolCall
	ToolName   string
	ToolCallID string
}

type PropType []string

func (pt PropType) MarshalJSON() ([]byte, error) {
	if len(pt) == 1 {
		return json.Marshal(pt[0])
	}
	return json.Marshal([]string(pt))
}

func (pt *PropType) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		*pt = []string{s}
		return nil
	}
	var a []string
	if err := json.Unmarshal(data, &a); err != nil {
		return err
	}
	*pt = a
	return nil
}

func (pt PropType) String() string {
	if len(pt) == 0 {
		return ""
	}
	if len(pt) == 1 {
		return pt[0]
	}
	return fmt.Sprintf("%v", []string(pt))
}

type Prop struct {
	AnyOf       []Prop   `json:"anyOf,omitempty"`
	Type        PropType `json:"type,omitempty"`
	Items       any      `json:"items,omitempty"`
	Description string   `json:"description,omitempty"`
	Enum        []any    `json:"enum,omitempty"`
	Properties  Props    `json:"properties,omitempty"`
	Required    []string `json:"required,omitempty"`
}

type Props map[string]Prop

func (p Props) String() string {
	if p == nil {
		return "{}"
	}
	b, _ := json.Marshal(p)
	return string(b)
}

type Params struct {
	Type       string   `json:"type"`
	Defs       any      `json:"$defs,omitempty"`
	Items      any      `json:"items,omitempty"`
	Required   []string `json:"required,omitempty"`
	Properties Props    `json:"properties"`
}

func (p Params) String() string { b, _ := json.Marshal(p); return string(b) }

type Function struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Parameters  Params `json:"parameters"`
}

// String is api.ToolFunction's: the description is left out when empty.
func (f Function) String() string {
	b, _ := json.Marshal(struct {
		Name        string `json:"name"`
		Description string `json:"description,omitempty"`
		Parameters  Params `json:"parameters"`
	}{f.Name, f.Description, f.Parameters})
	return string(b)
}

type Tool struct {
	Type     string   `json:"type"`
	Items    any      `json:"items,omitempty"`
	Function Function `json:"function"`
}

func (t Tool) String() string { b, _ := json.Marshal(t); return string(b) }

type Tools []Tool

func (t Tools) String() string { b, _ := json.Marshal(t); return string(b) }

type rawCall struct {
	ID       *string `json:"id"`
	Function struct {
		Name      string         `json:"name"`
		Arguments map[string]any `json:"arguments"`
	} `json:"function"`
}

type rawMessage struct {
	Role       string    `json:"role"`
	Content    string    `json:"content"`
	Thinking   string    `json:"thinking"`
	ToolCalls  []rawCall `json:"tool_calls"`
	ToolName   *string   `json:"tool_name"`
	ToolCallID *string   `json:"tool_call_id"`
}

type rawCase struct {
	Messages []rawMessage `json:"messages"`
	Tools    Tools        `json:"tools"`
	Think    any          `json:"think"`
	Prompt   string       `json:"prompt"`
	Suffix   string       `json:"suffix"`
}

var funcs = template.FuncMap{
	"json": func(v any) string {
		b, _ := json.Marshal(v)
		return string(b)
	},
	"currentDate":   func(args ...string) string { return now.Format("2006-01-02") },
	"yesterdayDate": func(args ...string) string { return now.AddDate(0, 0, -1).Format("2006-01-02") },
	"toTypeScriptType": func(v any) string {
		p, ok := v.(Prop)
		if !ok {
			return "any"
		}
		return tsType(p)
	},
}

func tsType(p Prop) string {
	if len(p.AnyOf) > 0 {
		var ts []string
		for _, a := range p.AnyOf {
			ts = append(ts, tsType(a))
		}
		return strings.Join(ts, " | ")
	}
	if len(p.Type) == 0 {
		return "any"
	}
	var ts []string
	for _, t := range p.Type {
		switch t {
		case "string":
			ts = append(ts, "string")
		case "number", "integer":
			ts = append(ts, "number")
		case "boolean":
			ts = append(ts, "boolean")
		case "array":
			ts = append(ts, "any[]")
		case "object":
			ts = append(ts, "Record<string, any>")
		case "null":
			ts = append(ts, "null")
		default:
			ts = append(ts, "any")
		}
	}
	return strings.Join(ts, " | ")
}

func identifiers(n parse.Node) []string {
	switch n := n.(type) {
	case *parse.ListNode:
		var out []string
		for _, c := range n.Nodes {
			out = append(out, identifiers(c)...)
		}
		return out
	case *parse.ActionNode:
		return identifiers(n.Pipe)
	case *parse.TemplateNode:
		if n.Pipe == nil {
			return nil
		}
		return identifiers(n.Pipe)
	case *parse.IfNode:
		return identifiers(&n.BranchNode)
	case *parse.RangeNode:
		return identifiers(&n.BranchNode)
	case *parse.WithNode:
		return identifiers(&n.BranchNode)
	case *parse.BranchNode:
		out := identifiers(n.Pipe)
		out = append(out, identifiers(n.List)...)
		if n.ElseList != nil {
			out = append(out, identifiers(n.ElseList)...)
		}
		return out
	case *parse.PipeNode:
		var out []string
		for _, c := range n.Cmds {
			for _, a := range c.Args {
				out = append(out, identifiers(a)...)
			}
		}
		return out
	case *parse.FieldNode:
		return n.Ident
	case *parse.VariableNode:
		return n.Ident
	}
	return nil
}

func vars(t *template.Template) map[string]bool {
	set := map[string]bool{}
	for _, tt := range t.Templates() {
		if tt.Tree == nil {
			continue
		}
		for _, id := range identifiers(tt.Tree.Root) {
			set[strings.ToLower(id)] = true
		}
	}
	return set
}

// cutAfterResponse keeps everything up to and including the first .Response field.
func cutAfterResponse(n parse.Node, cut *bool) parse.Node {
	if *cut {
		return nil
	}
	switch t := n.(type) {
	case *parse.ListNode:
		var nodes []parse.Node
		for _, c := range t.Nodes {
			if r := cutAfterResponse(c, cut); r != nil {
				nodes = append(nodes, r)
			}
		}
		t.Nodes = nodes
		return t
	case *parse.IfNode:
		cutBranch(&t.BranchNode, cut)
	case *parse.RangeNode:
		cutBranch(&t.BranchNode, cut)
	case *parse.WithNode:
		cutBranch(&t.BranchNode, cut)
	case *parse.ActionNode:
		var cmds []*parse.CommandNode
		for _, c := range t.Pipe.Cmds {
			var args []parse.Node
			for _, a := range c.Args {
				if *cut {
					continue
				}
				if f, ok := a.(*parse.FieldNode); ok {
					for _, id := range f.Ident {
						if id == "Response" {
							*cut = true
						}
					}
				}
				args = append(args, a)
			}
			if len(args) == 0 {
				return nil
			}
			c.Args = args
			cmds = append(cmds, c)
		}
		t.Pipe.Cmds = cmds
	}
	return n
}

func cutBranch(b *parse.BranchNode, cut *bool) {
	b.List = cutAfterResponse(b.List, cut).(*parse.ListNode)
	if b.ElseList != nil {
		if *cut {
			b.ElseList = nil
		} else {
			b.ElseList = cutAfterResponse(b.ElseList, cut).(*parse.ListNode)
		}
	}
}

func collate(msgs []Message) (string, []*Message) {
	var system []string
	var out []*Message
	for i := range msgs {
		if msgs[i].Role == "system" {
			system = append(system, msgs[i].Content)
		}
		if len(out) > 0 && out[len(out)-1].Role == msgs[i].Role && msgs[i].Role != "tool" {
			out[len(out)-1].Content += "\n\n" + msgs[i].Content
		} else {
			out = append(out, &msgs[i])
		}
	}
	return strings.Join(system, "\n\n"), out
}

func render(src string, c rawCase) (string, error) {
	tmpl, err := template.New("").Option("missingkey=zero").Funcs(funcs).Parse(src)
	if err != nil {
		return "", err
	}
	vs := vars(tmpl)
	if !vs["messages"] && !vs["response"] {
		tmpl.Tree.Root.Nodes = append(tmpl.Tree.Root.Nodes, &parse.ActionNode{
			NodeType: parse.NodeAction,
			Pipe: &parse.PipeNode{NodeType: parse.NodePipe, Cmds: []*parse.CommandNode{{
				NodeType: parse.NodeCommand,
				Args:     []parse.Node{&parse.FieldNode{NodeType: parse.NodeField, Ident: []string{"Response"}}},
			}}},
		})
	}

	think, thinkLevel, thinkSet := false, "", c.Think != nil
	switch v := c.Think.(type) {
	case bool:
		think = v
		if v {
			thinkLevel = "medium"
		}
	case string:
		think, thinkLevel = true, v
	}

	var msgs []Message
	for _, m := range c.Messages {
		msg := Message{Role: m.Role, Content: m.Content, Thinking: m.Thinking}
		if m.ToolName != nil {
			msg.ToolName = *m.ToolName
		}
		if m.ToolCallID != nil {
			msg.ToolCallID = *m.ToolCallID
		}
		for i, tc := range m.ToolCalls {
			call := ToolCall{Function: ToolCallFunction{Index: i, Name: tc.Function.Name, Arguments: Args(tc.Function.Arguments)}}
			if tc.ID != nil {
				call.ID = *tc.ID
			}
			msg.ToolCalls = append(msg.ToolCalls, call)
		}
		msgs = append(msgs, msg)
	}

	var b bytes.Buffer
	if c.Prompt != "" && c.Suffix != "" {
		err := tmpl.Execute(&b, map[string]any{"Prompt": c.Prompt, "Suffix": c.Suffix, "Response": "",
			"Think": think, "ThinkLevel": thinkLevel, "IsThinkSet": thinkSet})
		return b.String(), err
	}
	system, collated := collate(msgs)
	if vs["messages"] {
		var tools Tools
		if len(c.Tools) > 0 {
			tools = c.Tools
		}
		err := tmpl.Execute(&b, map[string]any{"System": system, "Messages": collated, "Tools": tools, "Response": "",
			"Think": think, "ThinkLevel": thinkLevel, "IsThinkSet": thinkSet})
		return b.String(), err
	}
	system = ""
	var prompt, response string
	exec := func(t *template.Template) error {
		err := t.Execute(&b, map[string]any{"System": system, "Prompt": prompt, "Response": response,
			"Think": think, "ThinkLevel": thinkLevel, "IsThinkSet": thinkSet})
		system, prompt, response = "", "", ""
		return err
	}
	for _, m := range collated {
		switch m.Role {
		case "system":
			if prompt != "" || response != "" {
				if err := exec(tmpl); err != nil {
					return "", err
				}
			}
			system = m.Content
		case "user":
			if response != "" {
				if err := exec(tmpl); err != nil {
					return "", err
				}
			}
			prompt = m.Content
		case "assistant":
			response = m.Content
		}
	}
	cut := false
	root := cutAfterResponse(tmpl.Tree.Root.Copy(), &cut).(*parse.ListNode)
	last, err := tmpl.Clone()
	if err != nil {
		return "", err
	}
	if _, err := last.AddParseTree("", &parse.Tree{Root: root}); err != nil {
		return "", err
	}
	err = exec(last)
	return b.String(), err
}

func main() {
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(self))
	manifestBytes, err := os.ReadFile(filepath.Join(root, "go", "manifest.json"))
	if err != nil {
		panic(err)
	}
	var manifest map[string]struct {
		Cases []string `json:"cases"`
	}
	if err := json.Unmarshal(manifestBytes, &manifest); err != nil {
		panic(err)
	}
	var names []string
	for n := range manifest {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		src, err := os.ReadFile(filepath.Join(root, "go", name+".gotmpl"))
		if err != nil {
			panic(err)
		}
		for _, cs := range manifest[name].Cases {
			raw, err := os.ReadFile(filepath.Join(root, "cases", cs+".json"))
			if err != nil {
				panic(err)
			}
			var c rawCase
			if err := json.Unmarshal(raw, &c); err != nil {
				panic(err)
			}
			out, err := render(string(src), c)
			if err != nil {
				panic(fmt.Sprintf("%s/%s: %v", name, cs, err))
			}
			dir := filepath.Join(root, "go", "expected", name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				panic(err)
			}
			if err := os.WriteFile(filepath.Join(dir, cs+".txt"), []byte(out), 0o644); err != nil {
				panic(err)
			}
			fmt.Fprintf(os.Stderr, "%s/%s: %d bytes\n", name, cs, len(out))
		}
	}
}
