"""The index and LibCST's tree list the same imports, calls, loops and defs, in the same order (the rewrites find
a node's LibCST twin by its place), and the index's own facts: training loops, what runs per step."""

from __future__ import annotations

import ast
import textwrap

import libcst as cst
import pytest

from fixture_support import FIXTURES
from torchlint.fix.analysis import FileAnalysis
from torchlint.facts.index import AstIndex, call_name, index_of

SAMPLES = sorted(FIXTURES.rglob("*.py"))

TRICKY = textwrap.dedent(
    """\
    import torch as t, numpy
    import os.path
    try:
        from torch.optim.lr_scheduler import LRScheduler
    except ImportError:
        from torch.optim.lr_scheduler import _LRScheduler as LRScheduler
    from . import sibling
    from x import *

    def train(model, loader, opt):
        import torch.nn.functional as F
        for x, y in tqdm(loader):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            print(loss.item())
            for k in range(3):
                helper(lambda: log(k))
        while cond(opt):
            pass

    class Trainer:
        def fit(self):
            def inner():
                for batch in self.data:
                    self.optimizer.step()
            return inner
    """
)


def _facts_cst(source: str):
    """What the rewrites take from LibCST's tree: the import table, and the calls, loops and defs in
    source order (the twins of the index's are found by place)."""
    from torchlint.fix.analysis import call_name

    a = FileAnalysis(cst.parse_module(source), source)
    loops = [type(l.node).__name__ for l in a.loops]
    calls = [call_name(c) for c in a.calls]
    functions = [(f.name, f.class_name is not None) for f in a.functions]
    return a.imports, loops, calls, functions


def _facts_ast(source: str):
    index = index_of(ast.parse(source))
    kinds = {"AsyncFor": "For"}
    loops = [kinds.get(type(l.node).__name__, type(l.node).__name__) for l in index.loops]
    calls = [call_name(info.node) for info in index.calls]
    functions = [(f.name, index.class_of[f] is not None) for f in index.functions]
    return index.imports, loops, calls, functions


def test_tricky_module_has_the_same_facts():
    assert _facts_ast(TRICKY) == _facts_cst(TRICKY)
    index = index_of(ast.parse(TRICKY))
    assert index.imports["LRScheduler"] == "torch.optim.lr_scheduler._LRScheduler"  # the last binding wins
    assert index.qualified_name(ast.parse("t.nn.Linear", mode="eval").body) == "torch.nn.Linear"
    printed = index.calls_by_name["print"][0]
    assert index.training_loop_of(printed) is not None
    logged = index.calls_by_name["log"][0]
    assert index.training_loop_of(logged) is None  # inside a lambda: not run by the loop
    assert index.training_loop_of(index.calls_by_name["tqdm"][0]) is None  # the loop's header


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_fixture_has_the_same_facts(path):
    source = path.read_text(encoding="utf-8")
    assert _facts_ast(source) == _facts_cst(source)


def test_the_walk_records_every_node_type_it_has_a_branch_for():
    """`_walk` skips its branches for node types outside `_RECORDED_TYPES`: every type it compares `kind`
    with must be there, or a branch added later would silently never run."""
    import inspect

    from torchlint.facts import index as ast_index

    compared = set()
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(ast_index.AstIndex._walk)))):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "kind":
            for operand in node.comparators:
                if isinstance(operand, ast.Attribute) and getattr(operand.value, "id", None) == "ast":
                    compared.add(getattr(ast, operand.attr))
                elif isinstance(operand, ast.Name) and operand.id != "_RECORDED_TYPES":
                    compared.update(getattr(ast_index, operand.id))
    assert {ast.Call, ast.Assign, ast.For, ast.FunctionDef, ast.Module, ast.If} <= compared
    assert compared <= ast_index._RECORDED_TYPES


# Expressions whose text LibCST writes otherwise than the source slice `ast` places: parentheses (around a
# bound, a callee, a receiver), lines continued inside brackets (indentation), comments, `\` continuations.
CODE_SAMPLES = [
    textwrap.dedent(
        """\
        class M:
            def forward(self, x):
                for i in (  # the bound
                        range(
                    x . shape[0])):
                    out[i] = (torch.sigmoid((x)[i])
                    if True else w[(i)])
                    y = f(a,
                  b) + \\
                         c
                    (out)[i] = ((x[i]))  ;  z = print (x) (y)
                    rows.append(x[i, ::2] @ y[
                        # a comment line
                        i])
                    s = '''a
            b''' + (
                        t)
        """),
    "x = [f(a) for a in b]\nif (a): y = (g)(h)[(0)]\nfor (i) in range((n)): pass\nz = (a, b), (c)\nw = x[1 :  , 2 : ]\n",
    "out[i] = (x[i]\r\n    * 2)\r\nfor i in range(\r\n  len(x)): pass\r\n",
]


def _expression_pairs(source: str):
    """(ast node, its statement, LibCST node) for the names, calls, subscripts, attributes, operations and
    numbers of every simple statement and `for` header, matched by their places."""
    from libcst.metadata import MetadataWrapper, PositionProvider

    kinds = {ast.Name: cst.Name, ast.Call: cst.Call, ast.Subscript: cst.Subscript, ast.Attribute: cst.Attribute,
             ast.BinOp: cst.BinaryOperation, ast.Constant: cst.Integer, ast.Slice: cst.Slice}
    wrapper = MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    by_place = {}
    for node, where in positions.items():
        if type(node) in kinds.values():
            by_place[(type(node), where.start.line, where.start.column, where.end.line, where.end.column)] = node
    index = index_of(ast.parse(source), source)
    for statement in ast.walk(index.tree):
        if not isinstance(statement, ast.stmt) or isinstance(statement, (ast.ClassDef, ast.FunctionDef, ast.If)):
            continue
        roots = [statement.target, statement.iter] if isinstance(statement, ast.For) else [statement]
        for node in (n for root in roots for n in ast.walk(root)):
            if type(node) in kinds:
                found = by_place.get((kinds[type(node)], *index.span(node)))
                if found is not None:
                    yield index, node, statement, wrapper.module, found


@pytest.mark.parametrize("source", CODE_SAMPLES)
def test_code_for_node_writes_what_libcst_writes(source):
    compared = 0
    for index, node, statement, module, cst_node in _expression_pairs(source):
        assert index.code_for_node(node, statement) == module.code_for_node(cst_node), ast.dump(node)
        assert index.code_for_node(node, statement, newline="\n") == cst.Module([]).code_for_node(cst_node)
        compared += 1
    assert compared > 10


def test_code_for_node_splices_replacements_in():
    source = "def f():\n    y = g(a[i],\n          b)\n"
    index = index_of(ast.parse(source), source)
    statement = index.tree.body[0].body[0]
    code = index.statement_code(statement)
    call, subscript = statement.value, statement.value.args[0]
    assert code.text(*code.place(call), replacements=[(*code.place(subscript), "a")]) == "g(a,\n      b)"


def test_a_tuple_has_its_own_brackets_only_where_they_hold_it_alone():
    source = "x[(a, b)]\nx[a, b]\nx[(a), b]\nx[()]\nx[(a), (b)]\nx[('é', b)]\n"
    index = index_of(ast.parse(source), source)
    assert [index.has_own_brackets(s.value.slice) for s in index.tree.body] == [True, False, False, True, False, True]


def test_a_body_on_the_header_line_is_one_logical_line_with_it():
    source = ("for x in y: f(x)\nfor x in y: \\\n    f(x)\nfor x in y:  # c \\\n    f(x)\nfor x in (\n        y):\n    f(x)\n"
              "if (x  # c\n      ): f(x); g(x)\nwhile x:\n    f(x)\n")
    index = index_of(ast.parse(source), source)
    assert [index.body_on_header_line(s) for s in index.tree.body] == [True, True, False, False, True, False]


def test_a_slice_ending_in_a_colon_holds_the_space_after_it_as_in_libcst():
    source = "w = x[1 :  , 2 : ]\n"
    index = index_of(ast.parse(source), source)
    statement = index.tree.body[0]
    ours = [index.code_for_node(s, statement) for s in statement.value.slice.elts]
    module = cst.parse_module(source)
    elements = module.body[0].body[0].value.slice
    assert ours == [module.code_for_node(e.slice) for e in elements] == ["1 :  ", "2 : "]


def test_statement_block_is_the_list_that_holds_the_statement():
    source = "if c:\n    a = 1\nelse:\n    b = 2\n    c = 3\ntry:\n    pass\nfinally:\n    d = 4\ne = 5\n"
    tree = ast.parse(source)
    index = index_of(tree, source)
    branch, trial, last = tree.body
    assert index.statement_block(branch.body[0]) is branch.body
    assert index.statement_block(branch.orelse[1]) is branch.orelse
    assert index.statement_block(trial.finalbody[0]) is trial.finalbody
    assert index.statement_block(last) is tree.body


def test_literal_string_reads_one_literal_and_never_fails_without_the_text():
    source = "a = 'cuda'\nb = 'cu' 'da'\nc = f'x'\n"
    tree = ast.parse(source)
    index = AstIndex(tree, source)
    values = [statement.value for statement in tree.body]
    assert [index.literal_string(v) for v in values] == ["cuda", None, None]
    assert AstIndex(tree).literal_string(values[0]) is None  # an index without its text cannot tell


OWNED_TEXT = textwrap.dedent(
    """\
    # the module's header, not the first statement's
    import torch


    # leads the def
    @decorator
    # between the decorator and the def
    def f():  # on the header
        # leads the first statement
        for x in y:
            pass
            # the loop body's footer
        # f's footer
      # shallower, still before f's last footer line
    # at column 0, still before it
        # the last line of f's footer

    # leads g
    def g():
        if a:
            pass
          # a shallow line the if block does not own
        elif b:
            pass
            # the elif's footer
        else:
            try:
                pass
            except E:
                pass
                # the handler's footer
            finally:
                pass
        # g's footer
    class C: pass
    # leads h
    async def h(): await x
    # the module's footer
    """
)


@pytest.mark.parametrize("source", [OWNED_TEXT, "def f():\n\tpass\n\t# t\n# u\n", *SAMPLES],
                         ids=lambda source: source.name if hasattr(source, "name") else repr(source[:20]))
def test_owned_text_is_what_libcst_writes_for_a_compound_statement(source):
    """The text LibCST's ``code_for_node`` gives a compound statement (leading comment lines, decorators,
    the footers of its blocks), line by line; LibCST leaves out the indentation of the block around it."""
    source = source if isinstance(source, str) else source.read_text(encoding="utf-8")
    index = index_of(ast.parse(source), source)
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.For, ast.AsyncFor, ast.If, ast.Try, ast.ClassDef, ast.While)
    elifs = {n.orelse[0] for n in ast.walk(index.tree) if isinstance(n, ast.If) and len(n.orelse) == 1
             and source.splitlines()[n.orelse[0].lineno - 1].lstrip().startswith("elif")}  # LibCST writes an elif alone as `if`
    ours = sorted((n for n in ast.walk(index.tree) if isinstance(n, kinds) and n not in elifs),
                  key=lambda n: (n.lineno, n.col_offset))
    module = cst.parse_module(source)
    theirs = []

    class Compound(cst.CSTVisitor):
        def on_visit(self, node):
            if isinstance(node, (cst.FunctionDef, cst.For, cst.If, cst.Try, cst.ClassDef, cst.While)):
                theirs.append(node)
            if isinstance(node, cst.If) and isinstance(node.orelse, cst.If):
                skipped.add(node.orelse)
            return True

    skipped = set()
    module.visit(Compound())
    theirs = [node for node in theirs if node not in skipped]

    assert len(ours) == len(theirs)
    lines = lambda text: [line.strip() for line in text.splitlines()]  # noqa: E731
    for node, twin in zip(ours, theirs):
        assert lines(index.owned_text(node)) == lines(module.code_for_node(twin)), ast.dump(node)[:80]


def test_definition_name_stands_where_libcst_places_the_name():
    from libcst.metadata import MetadataWrapper, PositionProvider

    source = "def f(): pass\nasync  def \\\n  g(): pass\nclass  Ä: pass\nclass A:\n    s = 'é'; def_ = 1\n    def \\\n é(self): pass\n"
    index = index_of(ast.parse(source), source)
    wrapper = MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    names = [node.name for node in wrapper.module.body if isinstance(node, (cst.FunctionDef, cst.ClassDef))]
    names.append(wrapper.module.body[-1].body.body[1].name)  # `é`, after a line holding "def"
    defs = [n for n in ast.walk(index.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    defs.sort(key=lambda n: n.lineno)
    assert len(defs) == len(names) == 5
    for node, name in zip(defs, names):
        where = positions[name]
        assert index.span(index.definition_name(node)) == (where.start.line, where.start.column, where.end.line,
                                                           where.end.column)


def test_module_alias_is_the_first_local_name_bound_to_the_module():
    source = "import numpy\nimport torch as t\nimport torch\nfrom torch import nn as torch\n"
    index = index_of(ast.parse(source), source)
    assert index.module_alias("torch") == "t" == FileAnalysis(cst.parse_module(source)).module_alias("torch")
    assert index.module_alias("os") is None
def test_names_spelled_count_what_libcst_calls_names():
    """As LibCST's ``Name`` nodes: variables, attribute and keyword names, parameters, the names of defs,
    classes and imports, ``global`` and ``except ... as`` names."""
    from torchlint.facts.index import names_spelled, spells_name

    tree = ast.parse(textwrap.dedent(
        """\
        import a.b as c
        from d.e import f
        def g(h, *i, j=1, **k):
            global m
            try:
                n.o(p=q)
            except E as r:
                s = lambda t: t
        class U: pass
        """))
    spelled = sorted({spelling for spelling, *_ in names_spelled(tree)})
    assert spelled == sorted("a b c d e f g h i j k m n o p q E r s t U".split())
    kinds = {spelling: how for spelling, _, how, _ in names_spelled(tree)}
    assert (kinds["n"], kinds["o"], kinds["p"], kinds["h"]) == ("name", "attribute", "keyword", "other")
    assert spells_name(tree.body[2], "q") and not spells_name(tree.body[0], "q")
# A message that quotes a line of simple statements quotes LibCST's first line of it: the comment lines
# above it that LibCST gives it (not those the module's header or the footer of the block before takes).
FIRST_LINES = [
    "# top\n\n# second\nm.bias.zero_()\n",
    "def f(m):\n    x = 1\n    # zero it\n\n    m.bias.data.zero_()  # c\n",
    "def f():\n    # first\n    m.bias.zero_()\n",
    "if a:\n    pass\n        # deeper\n\n    # same\n# less\nm.bias\n",
    "if a:\n    pass\n# less\n    # deeper after\nm.bias\n",
    "if a:\n    pass\n\n  # mid\nm.bias\n",
    "def f():\n    if a:\n        pass\n    # same\n  # less-mid\n    x.bias\n",
    "if a:\n    pass\nelif b:\n    pass\n    # elif footer\n# mine\nx = 1; y = 2\n",
    "try:\n    pass\nexcept E:\n    pass\n    # handler footer\nx = f(\n    1)   \n",
    "for x in y:\n    pass\nelse:\n    pass\n  # else footer?\nz = 3\n",
    "if a: pass\n    # after a suite\nz = 3 \\\n  + 1\n",
    "class C:\n    def f(self):\n        pass\n        # method footer\n    # class level\n    y = 2\n",
]


def _first_lines_libcst(source):
    module = cst.parse_module(source)
    found = []

    def visit(node):
        if isinstance(node, cst.SimpleStatementLine):
            found.append(module.code_for_node(node).strip().splitlines()[0])
        for child in node.children:
            visit(child)

    visit(module)
    return found


def _first_lines_ast(source):
    from torchlint.facts.index import COMPOUND_STATEMENTS, StatementLine

    index = AstIndex(ast.parse(source), source)
    lines = {}
    for node in ast.walk(index.tree):
        if isinstance(node, ast.stmt) and type(node) not in COMPOUND_STATEMENTS:
            line = index.statement_line(node)
            if isinstance(line, StatementLine):
                lines[(line.first.lineno, line.first.col_offset)] = index.statement_line_first_line(line)
    return [lines[place] for place in sorted(lines)]


@pytest.mark.parametrize("source", FIRST_LINES + [path.read_text(encoding="utf-8") for path in SAMPLES],
                         ids=[f"case{i}" for i in range(len(FIRST_LINES))] + [p.name for p in SAMPLES])
def test_a_statement_line_is_quoted_from_its_first_line_as_libcst_writes_it(source):
    assert _first_lines_ast(source) == _first_lines_libcst(source)


def test_attributes_named_are_every_attribute_of_that_name_in_source_order():
    source = "m.bias.data.zero_()\nclass C:\n    def f(self):\n        return self.bias, (g(x.bias).bias)\n"
    index = AstIndex(ast.parse(source), source)
    assert [ast.unparse(node) for node in index.attributes_named("bias")] == [
        "m.bias", "self.bias", "g(x.bias).bias", "x.bias"]
    assert index.attributes_named("weight") == []


def test_names_parents_and_attributes_are_the_same_whichever_is_asked_first():
    # names_named builds the parents and attribute groups in its walk where they are not built yet
    source = "import m\nm.bias.data.zero_()\nclass C(m.Base):\n    def f(self, x):\n        return [x.bias for x in m]\n"

    def answers(first):
        index = AstIndex(ast.parse(source), source)
        first(index)
        names = {name: [(ast.unparse(use), ast.unparse(parent)) for use, parent in index.names_named(name)]
                 for name in ("m", "x", "self", "C")}
        attributes = [ast.unparse(node) for node in index.attributes_named("bias")]
        parents = sorted((ast.unparse(node), ast.unparse(parent)) for node, parent in index.parents.items())
        return names, attributes, parents

    expected = answers(lambda index: (index.parents, index.attributes_named("bias")))
    assert answers(lambda index: index.names_named("m")) == expected
    assert answers(lambda index: index.parents) == expected
    assert expected[0]["m"] == [("m", "m.bias"), ("m", "m.Base"), ("m", " for x in m")]
    assert expected[0]["x"] == [("x", "x.bias"), ("x", " for x in m")] and expected[0]["self"] == []
    assert expected[1] == ["m.bias", "x.bias"]


def test_binary_operations_are_every_operation_of_that_operator_in_source_order():
    source = "y = (a @ b) @ c\nclass C:\n    def f(self):\n        return self.w @ (x + 1) * 2\n"
    index = AstIndex(ast.parse(source), source)
    assert [ast.unparse(node) for node in index.binary_operations(ast.MatMult)] == [
        "a @ b @ c", "a @ b", "self.w @ (x + 1)"]
    assert [ast.unparse(node) for node in index.binary_operations(ast.Add)] == ["x + 1"]
    assert index.binary_operations(ast.Div) == []


def test_the_simple_statement_next_to_another_is_on_a_line_of_simple_statements():
    source = "a = 1; b = 2\nc = 3\nif x: d = 4; e = 5\nfor y in z:\n    pass\nf = 6\n"
    index = AstIndex(ast.parse(source), source)
    a, b, c, branch, loop, f = index.tree.body
    d, e = branch.body
    assert index.simple_statement_next_to(b, -1) is a and index.simple_statement_next_to(b, 1) is c
    assert index.simple_statement_next_to(a, -1) is None and index.simple_statement_next_to(c, 1) is None
    assert index.simple_statement_next_to(e, -1) is None  # a body on its header's line: LibCST's suite
    assert index.simple_statement_next_to(f, -1) is None  # after a compound statement
    assert index.simple_statement_next_to(loop, -1) is None and index.simple_statement_next_to(branch, -1) is c


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_source_segment_is_the_stdlibs(path):
    source = path.read_text(encoding="utf-8")
    index = index_of(ast.parse(source), source)
    for info in index.calls:
        assert index.source_segment(info.node) == (ast.get_source_segment(source, info.node) or "")


def test_source_segment_across_line_ends_and_wide_characters():
    source = "x = f(\r\n  'é',\r  g(1)\n)  # c\fd\ny = h('ü' )"
    index = index_of(ast.parse(source), source)
    for info in index.calls:
        assert index.source_segment(info.node) == ast.get_source_segment(source, info.node)


def _index(source: str) -> AstIndex:
    source = textwrap.dedent(source)
    return index_of(ast.parse(source), source)


def test_training_loops_are_the_ones_that_step():
    index = _index(
        """
        def fit(model, optimizer, scheduler, train_loader, epochs):
            for epoch in range(epochs):
                for x, y in train_loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                    seen = loss.item()
                scheduler.step()
                last = loss.item()

        def evaluate(model, val_loader):
            for x, y in val_loader:
                out = model(x).item()

        while True:
            scaler.step(opt)
            v = value.item()
        """
    )
    outer, inner, val, loop = index.loops
    assert (outer.is_training, inner.is_training, val.is_training, loop.is_training) == (False, True, False, True)
    seen, last, out, v = index.calls_by_name["item"]
    assert index.training_loop_of(seen) is inner
    assert index.training_loop_of(last) is None  # once per epoch: not a per-step sync
    assert index.training_loop_of(out) is None
    assert index.training_loop_of(v) is loop


def test_scheduler_step_is_not_an_optimizer_step():
    index = _index(
        """
        for batch in data:
            lr_scheduler.step()
            sched.step()
        opt = torch.optim.SGD(params, lr=1)
        for batch in data:
            opt.step()
        """
    )
    first, second = index.loops
    assert not first.is_training and second.is_training


def test_a_tuple_assignment_binds_each_name_its_part():
    from torchlint.facts.index import AstIndex

    source = ("a, (b, c) = f(), (g(), h())\n"
              "x, y = batch\n"
              "p, *q = r, s, t\n"
              "class T:\n"
              "    def __init__(self):\n"
              "        self.u, self.v = U(), V()\n")
    index = AstIndex(ast.parse(source), source)
    named = {name: [ast.unparse(v) if v is not None else None for v in index.values_of(name, index.tree)]
             for name in "abcxypq"}
    assert named == {"a": ["f()"], "b": ["g()"], "c": ["h()"], "x": [None], "y": [None], "p": [None], "q": [None]}
    klass = index.classes[0]
    assert [ast.unparse(v) for v in index.self_attributes[(klass, "u")]] == ["U()"]
    assert [ast.unparse(v) for v in index.self_attributes[(klass, "v")]] == ["V()"]


_SKIPPED_BY_EVERY_NODE = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


@pytest.mark.parametrize("path", SAMPLES[::7], ids=lambda p: p.parent.name + "/" + p.name)
def test_every_node_is_ast_walk_without_contexts_and_operators(path):
    from torchlint.facts.index import every_node

    tree = ast.parse(path.read_text(encoding="utf-8"))
    walked = [id(node) for node in every_node(tree)]
    assert len(walked) == len(set(walked))
    assert set(walked) == {id(node) for node in ast.walk(tree) if not isinstance(node, _SKIPPED_BY_EVERY_NODE)}


@pytest.mark.parametrize("path", SAMPLES[::7], ids=lambda p: p.parent.name + "/" + p.name)
def test_block_position_is_the_statements_place_in_its_block(path):
    source = path.read_text(encoding="utf-8")
    index = AstIndex(ast.parse(source), source)
    for node in ast.walk(index.tree):
        if isinstance(node, ast.stmt):
            block = index.statement_block(node)
            assert block[index.block_position(node)] is node
