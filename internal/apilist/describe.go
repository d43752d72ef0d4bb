package main

import (
	"fmt"
	"go/types"
	"sort"
	"strings"
)

// describe lists pkg's exported API, one sorted line per entry, and counts its exported
// top-level names.
//
//	const DefaultLease time.Duration = 60000000000
//	var ErrKeyReused error
//	func New(Config) (*Engine, error)
//	type Config struct
//	type Config struct, Store storage.Store
//	type Config struct, embedded core.Config
//	type Hooks interface, Observe(context.Context, Event)
//	type Outcome string
//	method (*Engine) Middleware(func(*http.Request) string) func(http.Handler) http.Handler
//
// Types of other packages are qualified by package name; parameter names are left out.
func describe(pkg *types.Package) (lines []string, names int) {
	f := formatter{pkg: pkg}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		names++
		switch obj := obj.(type) {
		case *types.Const:
			lines = append(lines, fmt.Sprintf("const %s %s = %s", name, f.typ(obj.Type()), obj.Val().ExactString()))
		case *types.Var:
			lines = append(lines, fmt.Sprintf("var %s %s", name, f.typ(obj.Type())))
		case *types.Func:
			sig := obj.Type().(*types.Signature)
			lines = append(lines, fmt.Sprintf("func %s%s%s", name, f.typeParams(sig.TypeParams()), f.signature(sig)))
		case *types.TypeName:
			lines = append(lines, f.typeName(obj)...)
		}
	}
	sort.Strings(lines)
	return lines, names
}

type formatter struct{ pkg *types.Package }

func (f formatter) qualifier(p *types.Package) string {
	if p == f.pkg {
		return ""
	}
	return p.Name()
}

func (f formatter) typeName(obj *types.TypeName) []string {
	name := obj.Name()
	if obj.IsAlias() {
		return []string{fmt.Sprintf("type %s = %s", name, f.typ(types.Unalias(obj.Type())))}
	}
	named, ok := obj.Type().(*types.Named)
	if !ok {
		return []string{fmt.Sprintf("type %s %s", name, f.typ(obj.Type()))}
	}
	head := "type " + name + f.typeParams(named.TypeParams())
	var lines []string
	switch u := named.Underlying().(type) {
	case *types.Struct:
		lines = append(lines, head+" struct")
		for i := 0; i < u.NumFields(); i++ {
			fld := u.Field(i)
			switch {
			case fld.Embedded():
				if exportedType(fld.Type()) {
					lines = append(lines, fmt.Sprintf("%s struct, embedded %s", head, f.typ(fld.Type())))
				}
			case fld.Exported():
				lines = append(lines, fmt.Sprintf("%s struct, %s %s", head, fld.Name(), f.typ(fld.Type())))
			}
		}
	case *types.Interface:
		lines = append(lines, head+" interface")
		unexported := false
		for i := 0; i < u.NumMethods(); i++ {
			m := u.Method(i)
			if !m.Exported() {
				unexported = true
				continue
			}
			lines = append(lines, fmt.Sprintf("%s interface, %s%s", head, m.Name(), f.signature(m.Type().(*types.Signature))))
		}
		if unexported {
			lines = append(lines, head+" interface, unexported methods")
		}
		return lines // an interface's methods are its own
	default:
		lines = append(lines, fmt.Sprintf("%s %s", head, f.typ(u)))
	}
	// The method set of *T holds every method callable on a T variable, promoted ones
	// included; a method also in T's own set is listed with a value receiver.
	values := types.NewMethodSet(named)
	ptrs := types.NewMethodSet(types.NewPointer(named))
	for i := 0; i < ptrs.Len(); i++ {
		m := ptrs.At(i).Obj().(*types.Func)
		if !m.Exported() {
			continue
		}
		recv := "*" + name
		if values.Lookup(m.Pkg(), m.Name()) != nil {
			recv = name
		}
		lines = append(lines, fmt.Sprintf("method (%s) %s%s", recv, m.Name(), f.signature(m.Type().(*types.Signature))))
	}
	return lines
}

// exportedType reports whether an embedded field's type is reachable by users.
func exportedType(t types.Type) bool {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	if n, ok := types.Unalias(t).(*types.Named); ok {
		return n.Obj().Exported()
	}
	return false
}

func (f formatter) typeParams(tps *types.TypeParamList) string {
	if tps.Len() == 0 {
		return ""
	}
	parts := make([]string, tps.Len())
	for i := range parts {
		tp := tps.At(i)
		parts[i] = tp.Obj().Name() + " " + f.typ(tp.Constraint())
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// signature prints sig without the "func" keyword and without parameter names.
func (f formatter) signature(sig *types.Signature) string {
	var b strings.Builder
	b.WriteString("(")
	params := sig.Params()
	for i := 0; i < params.Len(); i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		t := params.At(i).Type()
		if sig.Variadic() && i == params.Len()-1 {
			b.WriteString("..." + f.typ(t.(*types.Slice).Elem()))
			continue
		}
		b.WriteString(f.typ(t))
	}
	b.WriteString(")")
	res := sig.Results()
	switch res.Len() {
	case 0:
	case 1:
		b.WriteString(" " + f.typ(res.At(0).Type()))
	default:
		parts := make([]string, res.Len())
		for i := range parts {
			parts[i] = f.typ(res.At(i).Type())
		}
		b.WriteString(" (" + strings.Join(parts, ", ") + ")")
	}
	return b.String()
}

// typ prints t, leaving out parameter names wherever a function type occurs.
func (f formatter) typ(t types.Type) string {
	switch t := t.(type) {
	case *types.Signature:
		return "func" + f.signature(t)
	case *types.Pointer:
		return "*" + f.typ(t.Elem())
	case *types.Slice:
		return "[]" + f.typ(t.Elem())
	case *types.Array:
		return fmt.Sprintf("[%d]%s", t.Len(), f.typ(t.Elem()))
	case *types.Map:
		return "map[" + f.typ(t.Key()) + "]" + f.typ(t.Elem())
	case *types.Chan:
		switch t.Dir() {
		case types.SendOnly:
			return "chan<- " + f.typ(t.Elem())
		case types.RecvOnly:
			return "<-chan " + f.typ(t.Elem())
		}
		return "chan " + f.typ(t.Elem())
	case *types.Struct:
		parts := make([]string, t.NumFields())
		for i := range parts {
			fld := t.Field(i)
			if fld.Embedded() {
				parts[i] = f.typ(fld.Type())
			} else {
				parts[i] = fld.Name() + " " + f.typ(fld.Type())
			}
		}
		return "struct{" + strings.Join(parts, "; ") + "}"
	case *types.Interface:
		if t.Empty() {
			return "interface{}"
		}
		var parts []string
		for i := 0; i < t.NumEmbeddeds(); i++ {
			parts = append(parts, f.typ(t.EmbeddedType(i)))
		}
		for i := 0; i < t.NumExplicitMethods(); i++ {
			m := t.ExplicitMethod(i)
			parts = append(parts, m.Name()+f.signature(m.Type().(*types.Signature)))
		}
		return "interface{ " + strings.Join(parts, "; ") + " }"
	}
	return types.TypeString(t, f.qualifier)
}
