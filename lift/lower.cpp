// Lowering a SHARC_ELEMENTWISE function's Clang AST to sharc IR.
//
// The body is run symbolically, once, on an environment from variables to
// values. A value is a float (an IR node), a condition (a 0/1 mask node, maybe
// negated, or a known truth value) or a compile-time integer (loop counters,
// literals). Both sides of a data-dependent `if` are run on copies of the
// environment and the variables they change are merged with select. A return
// sets the result where the function has not yet returned (`done`, a
// condition), so early returns under branches become selects too. Loops must
// have a trip count known at compile time and are unrolled.
#include "lift/lower.h"

#include <clang/AST/ASTContext.h>
#include <clang/AST/Attr.h>
#include <clang/AST/Decl.h>
#include <clang/AST/Expr.h>
#include <clang/AST/ExprCXX.h>
#include <clang/AST/RecursiveASTVisitor.h>
#include <clang/AST/Stmt.h>
#include <clang/AST/StmtCXX.h>
#include <clang/Basic/SourceManager.h>
#include <clang/Lex/Lexer.h>

#include <bit>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace sharc::lift {
namespace {

using ir::Op;

// Thrown after a diagnostic has been reported: abandons the function.
struct Abandon {};

// A source position as sharc records it: the file relative to `root` when
// under it, the line and the column.
SrcLoc source_loc(const clang::SourceManager& sm, clang::SourceLocation at,
                  const std::string& root) {
  const clang::PresumedLoc p = sm.getPresumedLoc(sm.getFileLoc(at));
  if (p.isInvalid()) return SrcLoc();
  std::string file = p.getFilename();
  if (!root.empty() && file.rfind(root, 0) == 0) {
    file = file.substr(root.size());
    while (!file.empty() && file[0] == '/') file.erase(0, 1);
  }
  return SrcLoc(file, static_cast<int>(p.getLine()), static_cast<int>(p.getColumn()));
}

// A parameter's name; an unnamed one is called after its position.
std::string param_name(const clang::ParmVarDecl& p, int index) {
  const std::string n = p.getNameAsString();
  return n.empty() ? "arg" + std::to_string(index) : n;
}

struct Val {
  enum Kind { kNone, kFloat, kCond, kInt } kind = kNone;
  int node = -1;         // kFloat: the value; kCond: the mask (-1: known truth)
  bool negated = false;  // kCond with a mask: true where the mask is 0
  bool truth = false;    // kCond without a mask
  int64_t i = 0;         // kInt

  static Val float_node(int n) { return {kFloat, n, false, false, 0}; }
  static Val cond(int mask, bool negated) { return {kCond, mask, negated, false, 0}; }
  static Val known(bool t) { return {kCond, -1, false, t, 0}; }
  static Val integer(int64_t v) { return {kInt, -1, false, false, v}; }
  bool is_known_cond() const { return kind == kCond && node < 0; }
  bool operator==(const Val&) const = default;
};

struct State {
  std::map<const clang::VarDecl*, Val> env;
  Val result;                    // kNone until a return
  Val done = Val::known(false);  // where the function has returned
};

class FunctionLowerer {
 public:
  FunctionLowerer(clang::ASTContext& ctx, const LowerOptions& options, LiftedFunction& out)
      : ctx_(ctx), sm_(ctx.getSourceManager()), options_(options), out_(out) {
    error_id_ = ctx.getDiagnostics().getCustomDiagID(clang::DiagnosticsEngine::Error, "%0");
  }

  void lower(const clang::FunctionDecl& f) {
    g().name = f.getNameAsString();
    check_signature(f);
    std::vector<Val> args;
    for (const clang::ParmVarDecl* p : f.parameters()) {
      ir::Node n;
      n.op = Op::kInput;
      n.name = param_name(*p, static_cast<int>(args.size()));
      n.loc = loc_of(p->getLocation());
      args.push_back(Val::float_node(g().add(std::move(n))));
    }
    const Val r = call(f, args, f.getLocation());
    ir::Output o;
    o.name = "result";
    o.value = to_float(r, f.getLocation(), "return");
    out_.graph.outputs.push_back(o);
  }

 private:
  ir::Graph& g() { return out_.graph; }

  // ---- diagnostics ----------------------------------------------------------
  [[noreturn]] void fail(clang::SourceLocation at, const std::string& message) {
    ctx_.getDiagnostics().Report(at, error_id_) << message;
    throw Abandon{};
  }

  [[noreturn]] void fail_data_integer(clang::SourceLocation at) {
    fail(at,
         "an integer computed from data is not supported (only compile-time integers such "
         "as loop counters); use a float");
  }

  SrcLoc loc_of(clang::SourceLocation at) const {
    return source_loc(sm_, at, options_.source_root);
  }

  // An expression's source text, on one line, shortened: the node's name.
  std::string text_of(const clang::Stmt* s) const {
    const clang::CharSourceRange r = clang::CharSourceRange::getTokenRange(
        sm_.getFileLoc(s->getBeginLoc()), sm_.getFileLoc(s->getEndLoc()));
    std::string t = clang::Lexer::getSourceText(r, sm_, ctx_.getLangOpts()).str();
    std::string out;
    for (char c : t) {
      if (c == '\n' || c == '\t' || c == '\r') c = ' ';
      if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
      out += c;
    }
    if (out.size() > 48) out = out.substr(0, 45) + "...";
    return out;
  }

  static std::string type_str(clang::QualType t) { return t.getAsString(); }

  void check_signature(const clang::FunctionDecl& f) {
    if (llvm::isa<clang::CXXMethodDecl>(f))
      fail(f.getLocation(), "a member function cannot be SHARC_ELEMENTWISE; make '" +
                                f.getNameAsString() + "' a free function");
    if (f.isVariadic()) fail(f.getLocation(), "a variadic function cannot be SHARC_ELEMENTWISE");
    for (const clang::ParmVarDecl* p : f.parameters()) {
      const clang::QualType t = p->getType();
      if (t->isPointerType() || t->isReferenceType())
        fail(p->getLocation(), "parameter '" + p->getNameAsString() + "' is a " +
                                   (t->isPointerType() ? "pointer" : "reference") + " ('" +
                                   type_str(t) +
                                   "'); a SHARC_ELEMENTWISE function takes float or double "
                                   "by value");
      if (!t->isRealFloatingType())
        fail(p->getLocation(), "unsupported type '" + type_str(t) + "' of parameter '" +
                                   p->getNameAsString() +
                                   "'; a SHARC_ELEMENTWISE function takes float or double");
    }
    const clang::QualType r = f.getReturnType();
    if (!r->isRealFloatingType())
      fail(f.getReturnTypeSourceRange().getBegin().isValid()
               ? f.getReturnTypeSourceRange().getBegin()
               : f.getLocation(),
           "unsupported return type '" + type_str(r) +
               "'; a SHARC_ELEMENTWISE function returns float or double");
  }

  // ---- IR construction ------------------------------------------------------
  // A node for op(args), or the one made before for the same op and
  // operands (the ops are pure: an unrolled loop or an inlined call repeats
  // them), which keeps its first source position.
  // Its name is the source text of `at`.
  int add(Op op, std::vector<int> args, const clang::Stmt* at, clang::SourceLocation where) {
    return add_named(op, std::move(args), where, at ? text_of(at) : std::string());
  }
  int add_named(Op op, std::vector<int> args, clang::SourceLocation where, std::string name) {
    guard(op, args, where, name);
    auto [it, fresh] = made_.try_emplace({op, args}, -1);
    if (!fresh) return it->second;
    ir::Node n;
    n.op = op;
    n.args = std::move(args);
    n.loc = loc_of(where);
    n.name = std::move(name);
    return it->second = g().add(std::move(n));
  }
  // Both sides of a data-dependent branch run on every element, and the
  // select keeps one. An op that is undefined on part of its domain (pow of
  // a negative base, sqrt or log of a negative, a division by zero) or
  // overflows (exp of a large argument) may then make a NaN or an infinity
  // on the elements where its branch is not taken: harmless to the value,
  // fatal to the gradient (0 * NaN, 0 * inf). So under a condition such an
  // operand is replaced by 1 where the condition fails (the "double where"
  // of JAX users), which leaves the taken elements exactly as they were.
  void guard(Op op, std::vector<int>& args, clang::SourceLocation where, const std::string& name) {
    int operand = -1;
    if (op == Op::kPow || op == Op::kSqrt || op == Op::kLog || op == Op::kLog1p || op == Op::kExp ||
        op == Op::kExpm1)
      operand = 0;
    if (op == Op::kDiv) operand = 1;
    if (operand < 0 || path_.empty()) return;
    Val taken = Val::known(true);
    for (const Val& c : path_) taken = cond_and(taken, c, nullptr, where);
    if (taken.is_known_cond()) {
      if (taken.truth) return;
      args[static_cast<size_t>(operand)] = constant(1.0);  // never taken
      return;
    }
    const int x = args[static_cast<size_t>(operand)];
    const int one = constant(1.0);
    args[static_cast<size_t>(operand)] = add_named(
        Op::kSelect,
        taken.negated ? std::vector<int>{taken.node, one, x} : std::vector<int>{taken.node, x, one},
        where, "where taken: " + name);
  }
  // Runs f with condition c added to the path (see guard).
  template <class F>
  void under(const Val& c, F&& f) {
    const bool add_it = !c.is_known_cond();
    if (add_it) path_.push_back(c);
    f();
    if (add_it) path_.pop_back();
  }

  // Keyed by the bits, so NaN and -0.0 are constants of their own.
  int constant(double v) {
    const uint64_t bits = std::bit_cast<uint64_t>(v);
    if (auto it = constants_.find(bits); it != constants_.end()) return it->second;
    ir::Node n;
    n.op = Op::kConstant;
    n.scalar = v;
    return constants_[bits] = g().add(std::move(n));
  }

  int to_float(const Val& v, clang::SourceLocation at, const char* what) {
    switch (v.kind) {
      case Val::kFloat:
        return v.node;
      case Val::kInt:
        return constant(static_cast<double>(v.i));
      case Val::kCond:
        if (v.node < 0) return constant(v.truth ? 1.0 : 0.0);
        if (!v.negated) return v.node;
        return add_named(Op::kSub, {constant(1.0), v.node}, at,  // 1 - mask
                         "!(" + g().nodes[static_cast<size_t>(v.node)].name + ")");
      case Val::kNone:
        break;
    }
    fail(at, std::string("no value for ") + what);
  }
  Val to_cond(const Val& v, const clang::Stmt* at) {
    switch (v.kind) {
      case Val::kCond:
        return v;
      case Val::kInt:
        return Val::known(v.i != 0);
      case Val::kFloat:
        return Val::cond(add(Op::kEqual, {v.node, constant(0.0)}, at, at->getBeginLoc()), true);
      case Val::kNone:
        break;
    }
    fail(at->getBeginLoc(), "no value for a condition");
  }
  // c ? a : b on floats.
  int select(const Val& c, int a, int b, const clang::Stmt* at, clang::SourceLocation where) {
    if (c.is_known_cond()) return c.truth ? a : b;
    if (a == b) return a;
    return c.negated ? add(Op::kSelect, {c.node, b, a}, at, where)
                     : add(Op::kSelect, {c.node, a, b}, at, where);
  }
  // c ? a : b on any values of one kind (the merge of an if's two states).
  Val merge(const Val& c, const Val& a, const Val& b, const clang::Stmt* at,
            clang::SourceLocation where, const std::string& what) {
    if (c.is_known_cond()) return c.truth ? a : b;
    if (a == b) return a;
    if (a.kind == Val::kNone) return b;  // the other side has no value yet
    if (b.kind == Val::kNone) return a;
    if (a.kind == Val::kInt && b.kind == Val::kInt)
      fail(where, "integer '" + what +
                      "' would depend on data (it is assigned under a data-dependent "
                      "condition); use a float");
    if (a.kind == Val::kCond && b.kind == Val::kCond) {
      // Masks: the condition picks between the two truth values.
      if (a.is_known_cond() && b.is_known_cond()) {
        // c ? true : false is c; c ? false : true is !c.
        return a.truth ? c : Val::cond(c.node, !c.negated);
      }
      return Val::cond(
          select(c, to_float(a, where, what.c_str()), to_float(b, where, what.c_str()), at, where),
          false);
    }
    return Val::float_node(
        select(c, to_float(a, where, what.c_str()), to_float(b, where, what.c_str()), at, where));
  }
  // After a data-dependent fork on c: s becomes c ? t : f. A side that has
  // returned everywhere leaves its variables to the other (they matter only
  // where the function still runs).
  void merge_states(const Val& c, const State& t, const State& f, State& s, const clang::Stmt* at,
                    clang::SourceLocation where) {
    const bool t_returned = t.done.is_known_cond() && t.done.truth;
    const bool f_returned = f.done.is_known_cond() && f.done.truth;
    for (auto& [var, value] : s.env) {
      const Val a = t.env.at(var), b = f.env.at(var);
      value = t_returned ? b : f_returned ? a : merge(c, a, b, at, where, var->getNameAsString());
    }
    s.result = merge(c, t.result, f.result, at, where, "the result");
    s.done = merge(c, t.done, f.done, at, where, "return");
  }

  Val cond_and(const Val& a, const Val& b, const clang::Stmt* at, clang::SourceLocation where) {
    if (a.is_known_cond()) return a.truth ? b : a;
    if (b.is_known_cond()) return b.truth ? a : b;
    return Val::cond(add(Op::kMul, {to_float(a, where, "&&"), to_float(b, where, "&&")}, at, where),
                     false);
  }
  Val cond_or(const Val& a, const Val& b, const clang::Stmt* at, clang::SourceLocation where) {
    if (a.is_known_cond()) return a.truth ? a : b;
    if (b.is_known_cond()) return b.truth ? b : a;
    return Val::cond(add(Op::kMax, {to_float(a, where, "||"), to_float(b, where, "||")}, at, where),
                     false);
  }
  static Val cond_not(const Val& c) {
    return c.is_known_cond() ? Val::known(!c.truth) : Val::cond(c.node, !c.negated);
  }

  // A value converted to what a variable of type t holds.
  Val convert(const Val& v, clang::QualType t, const clang::Stmt* at) {
    if (t->isBooleanType()) return to_cond(v, at);
    if (t->isIntegerType()) {
      if (v.kind == Val::kInt) return v;
      if (v.is_known_cond()) return Val::integer(v.truth ? 1 : 0);
      fail_data_integer(at->getBeginLoc());
    }
    if (t->isRealFloatingType()) return Val::float_node(to_float(v, at->getBeginLoc(), "a value"));
    fail(at->getBeginLoc(), "unsupported type '" + type_str(t) + "'");
  }

  void check_local_type(const clang::VarDecl* v) {
    const clang::QualType t = v->getType();
    if (t->isPointerType() || t->isReferenceType())
      fail(v->getLocation(), std::string("local '") + v->getNameAsString() + "' is a " +
                                 (t->isPointerType() ? "pointer" : "reference") +
                                 "; lifted functions compute on values");
    if (!t->isRealFloatingType() && !t->isIntegerType() && !t->isBooleanType())
      fail(v->getLocation(), "unsupported type '" + type_str(t) + "' of local '" +
                                 v->getNameAsString() + "'; use float, double, int or bool");
  }

  // ---- calls ----------------------------------------------------------------
  Val call(const clang::FunctionDecl& f, const std::vector<Val>& args, clang::SourceLocation at) {
    const clang::FunctionDecl* def = nullptr;
    if (!f.hasBody(def) || !def)
      fail(at, "SHARC_ELEMENTWISE function '" + f.getNameAsString() +
                   "' has no body in this translation unit");
    for (const clang::FunctionDecl* open : stack_)
      if (open->getCanonicalDecl() == def->getCanonicalDecl()) {
        fail(at, "recursion: '" + f.getNameAsString() +
                     "' calls itself (through lifted calls); recursion cannot be unrolled");
      }
    stack_.push_back(def);
    State s;
    size_t i = 0;
    for (const clang::ParmVarDecl* p : def->parameters())
      s.env[p] = Val::float_node(to_float(args.at(i++), at, "an argument"));  // float parameters
    statement(def->getBody(), s);
    if (!(s.done.is_known_cond() && s.done.truth))
      fail(def->getBody()->getEndLoc(),
           "control reaches the end of '" + def->getNameAsString() + "' without a return");
    stack_.pop_back();
    return s.result;
  }

  // The op a <cmath> (or sharc::scalar) function lowers to, by its
  // qualified name; nullopt when it is none of them.
  static std::optional<Op> math_op(const std::string& name, int arity) {
    static const std::map<std::string, Op> unary = {
        {"exp", Op::kExp},        {"expf", Op::kExp},    {"log", Op::kLog},
        {"logf", Op::kLog},       {"sqrt", Op::kSqrt},   {"sqrtf", Op::kSqrt},
        {"tanh", Op::kTanh},      {"tanhf", Op::kTanh},  {"sin", Op::kSin},
        {"sinf", Op::kSin},       {"cos", Op::kCos},     {"cosf", Op::kCos},
        {"abs", Op::kAbs},        {"fabs", Op::kAbs},    {"fabsf", Op::kAbs},
        {"erf", Op::kErf},        {"erff", Op::kErf},    {"log1p", Op::kLog1p},
        {"log1pf", Op::kLog1p},   {"expm1", Op::kExpm1}, {"expm1f", Op::kExpm1},
        {"sigmoid", Op::kSigmoid}};
    static const std::map<std::string, Op> binary = {
        {"pow", Op::kPow},  {"powf", Op::kPow},  {"fmin", Op::kMin}, {"fminf", Op::kMin},
        {"fmax", Op::kMax}, {"fmaxf", Op::kMax}, {"min", Op::kMin},  {"max", Op::kMax}};
    const std::map<std::string, Op>& table = arity == 1 ? unary : binary;
    if (auto it = table.find(name); it != table.end()) return it->second;
    return std::nullopt;
  }

  bool in_system_header(const clang::Decl* d) const {
    return sm_.isInSystemHeader(sm_.getFileLoc(d->getLocation()));
  }

  static bool is_io_name(const std::string& name) {
    static const std::set<std::string> io = {
        "printf",  "fprintf", "sprintf",     "snprintf",     "puts",     "fputs",
        "putchar", "fputc",   "scanf",       "fscanf",       "sscanf",   "getchar",
        "fgets",   "fopen",   "fclose",      "fwrite",       "fread",    "perror",
        "write",   "read",    "std::printf", "std::fprintf", "std::puts"};
    return io.count(name) > 0;
  }

  Val call_expr(const clang::CallExpr* e, State& s) {
    if (const auto* op = llvm::dyn_cast<clang::CXXOperatorCallExpr>(e)) {
      const std::string t = type_str(op->getType());
      if (t.find("basic_ostream") != std::string::npos ||
          t.find("basic_istream") != std::string::npos)
        fail(op->getOperatorLoc(),
             "I/O in a SHARC_ELEMENTWISE function: lifted code runs inside generated kernels, "
             "where streams do not exist");
      fail(op->getOperatorLoc(), "unsupported call of an overloaded operator ('" + t + "')");
    }
    const clang::FunctionDecl* f = e->getDirectCallee();
    if (!f)
      fail(e->getBeginLoc(),
           "unsupported call through a pointer or function object; call "
           "a <cmath> or SHARC_ELEMENTWISE function by name");
    const std::string qname = f->getQualifiedNameAsString();
    const std::string name = f->getNameAsString();
    if (is_io_name(qname) || is_io_name(name))
      fail(e->getBeginLoc(), "I/O ('" + qname +
                                 "') in a SHARC_ELEMENTWISE function: lifted code runs inside "
                                 "generated kernels, with nowhere to print");
    std::vector<Val> args;
    for (const clang::Expr* a : e->arguments()) args.push_back(expr(a, s));
    if (is_lifted(*f)) return call(*f, args, e->getBeginLoc());

    const bool math = in_system_header(f) || qname.rfind("sharc::scalar::", 0) == 0;
    if (math) {
      std::string base = qname;
      for (const char* prefix : {"std::", "sharc::scalar::", "__gnu_cxx::"})
        if (base.rfind(prefix, 0) == 0) base = base.substr(std::string(prefix).size());
      std::vector<int> v;
      for (size_t i = 0; i < args.size(); ++i)
        v.push_back(
            to_float(args[i], e->getArg(static_cast<unsigned>(i))->getBeginLoc(), "an argument"));
      const clang::SourceLocation at = e->getBeginLoc();
      if (auto op = math_op(base, static_cast<int>(v.size())))
        return Val::float_node(add(*op, v, e, at));
      // Those sharc has no op for, composed from those it has.
      auto op = [&](Op o, std::vector<int> operands) { return add(o, std::move(operands), e, at); };
      std::string fn = base;
      if (!fn.empty() && fn.back() == 'f' && fn != "erf") fn.pop_back();  // exp2f -> exp2
      if (fn == "clamp" && v.size() == 3)
        return Val::float_node(op(Op::kMin, {op(Op::kMax, {v[0], v[1]}), v[2]}));
      if (fn == "exp2" && v.size() == 1)  // e^(x ln 2)
        return Val::float_node(op(Op::kExp, {op(Op::kMul, {v[0], constant(std::log(2.0))})}));
      if ((fn == "log2" || fn == "log10") && v.size() == 1)  // log(x) / log(base)
        return Val::float_node(op(
            Op::kMul, {op(Op::kLog, {v[0]}), constant(1.0 / std::log(fn == "log2" ? 2.0 : 10.0))}));
      if (fn == "fma" && v.size() == 3)  // rounded after the product too
        return Val::float_node(op(Op::kAdd, {op(Op::kMul, {v[0], v[1]}), v[2]}));
      if (fn == "hypot" && v.size() == 2)  // sqrt(a^2 + b^2), without the overflow guard
        return Val::float_node(op(
            Op::kSqrt, {op(Op::kAdd, {op(Op::kMul, {v[0], v[0]}), op(Op::kMul, {v[1], v[1]})})}));
    }
    fail(e->getBeginLoc(), "call to '" + qname +
                               "', which is neither a <cmath> function sharc knows nor a "
                               "SHARC_ELEMENTWISE function");
  }

  // ---- expressions ----------------------------------------------------------
  const clang::VarDecl* assigned_var(const clang::Expr* lhs) {
    const auto* ref = llvm::dyn_cast<clang::DeclRefExpr>(lhs->IgnoreParenImpCasts());
    const auto* v = ref ? llvm::dyn_cast<clang::VarDecl>(ref->getDecl()) : nullptr;
    if (!v) fail(lhs->getBeginLoc(), "unsupported assignment target; assign a local variable");
    if (v->hasGlobalStorage())
      fail(lhs->getBeginLoc(), "static or global state: '" + v->getNameAsString() +
                                   "' outlives the call; a lifted function may only assign "
                                   "its own locals");
    return v;
  }

  Val arith(clang::BinaryOperatorKind k, const Val& a, const Val& b, const clang::Expr* at,
            clang::SourceLocation where) {
    using clang::BinaryOperatorKind;
    if (a.kind == Val::kInt && b.kind == Val::kInt) {
      switch (k) {
        case clang::BO_Add:
          return Val::integer(a.i + b.i);
        case clang::BO_Sub:
          return Val::integer(a.i - b.i);
        case clang::BO_Mul:
          return Val::integer(a.i * b.i);
        case clang::BO_Div:
        case clang::BO_Rem:
          if (b.i == 0) fail(where, "integer division by zero");
          return Val::integer(k == clang::BO_Div ? a.i / b.i : a.i % b.i);
        default:
          break;
      }
    }
    Op op;
    switch (k) {
      case clang::BO_Add:
        op = Op::kAdd;
        break;
      case clang::BO_Sub:
        op = Op::kSub;
        break;
      case clang::BO_Mul:
        op = Op::kMul;
        break;
      case clang::BO_Div:
        op = Op::kDiv;
        break;
      default:
        fail(where, "unsupported operator '" + clang::BinaryOperator::getOpcodeStr(k).str() +
                        "' on floats");
    }
    return Val::float_node(
        add(op, {to_float(a, where, "an operand"), to_float(b, where, "an operand")}, at, where));
  }

  Val compare(clang::BinaryOperatorKind k, const Val& a, const Val& b, const clang::Expr* at,
              clang::SourceLocation where) {
    if (a.kind == Val::kInt && b.kind == Val::kInt) {
      switch (k) {
        case clang::BO_LT:
          return Val::known(a.i < b.i);
        case clang::BO_GT:
          return Val::known(a.i > b.i);
        case clang::BO_LE:
          return Val::known(a.i <= b.i);
        case clang::BO_GE:
          return Val::known(a.i >= b.i);
        case clang::BO_EQ:
          return Val::known(a.i == b.i);
        default:
          return Val::known(a.i != b.i);
      }
    }
    const int x = to_float(a, where, "an operand"), y = to_float(b, where, "an operand");
    // >=, <= and != are the negations of <, > and ==: the mask is made for
    // those, and named so ("!(a <= b)" reads as the mask's meaning).
    const std::string text = text_of(at), negated = "!(" + text + ")";
    switch (k) {
      case clang::BO_GT:
        return Val::cond(add_named(Op::kGreater, {x, y}, where, text), false);
      case clang::BO_LT:
        return Val::cond(add_named(Op::kGreater, {y, x}, where, text), false);
      case clang::BO_GE:
        return Val::cond(add_named(Op::kGreater, {y, x}, where, negated), true);
      case clang::BO_LE:
        return Val::cond(add_named(Op::kGreater, {x, y}, where, negated), true);
      case clang::BO_EQ:
        return Val::cond(add_named(Op::kEqual, {x, y}, where, text), false);
      default:
        return Val::cond(add_named(Op::kEqual, {x, y}, where, negated), true);
    }
  }

  // The value of a const variable with a constant initializer (an int or a
  // float), or nullopt.
  std::optional<Val> compile_time_constant(const clang::VarDecl* v) {
    if (!v->getType().isConstQualified() || !v->getInit()) return std::nullopt;
    const clang::APValue* c = v->evaluateValue();
    if (c && c->isInt()) return Val::integer(c->getInt().getSExtValue());
    if (c && c->isFloat()) return Val::float_node(constant(c->getFloat().convertToDouble()));
    return std::nullopt;
  }

  Val var_value(const clang::VarDecl* v, const clang::Expr* at, const State& s) {
    if (auto it = s.env.find(v); it != s.env.end()) {
      if (it->second.kind == Val::kNone)
        fail(at->getBeginLoc(), "'" + v->getNameAsString() + "' is read before it is assigned");
      return it->second;
    }
    if (v->hasGlobalStorage()) {
      // Constants are fine: constexpr or const with a constant initializer.
      if (const std::optional<Val> c = compile_time_constant(v)) return *c;
      fail(at->getBeginLoc(), std::string("static or global state: '") + v->getNameAsString() +
                                  "' is a " + (v->isStaticLocal() ? "static local" : "global") +
                                  " variable; a lifted function may read only its arguments, "
                                  "locals and compile-time constants");
    }
    fail(at->getBeginLoc(), "'" + v->getNameAsString() + "' is not a local of this function");
  }

  Val expr(const clang::Expr* e, State& s) {
    e = e->IgnoreParens();
    if (const auto* c = llvm::dyn_cast<clang::ImplicitCastExpr>(e))
      return cast(c, c->getSubExpr(), s);
    if (const auto* c = llvm::dyn_cast<clang::ExplicitCastExpr>(e))
      return cast(c, c->getSubExpr(), s);
    if (const auto* c = llvm::dyn_cast<clang::ExprWithCleanups>(e)) return expr(c->getSubExpr(), s);
    if (const auto* c = llvm::dyn_cast<clang::MaterializeTemporaryExpr>(e))
      return expr(c->getSubExpr(), s);
    if (const auto* c = llvm::dyn_cast<clang::CXXDefaultArgExpr>(e)) return expr(c->getExpr(), s);
    if (const auto* f = llvm::dyn_cast<clang::FloatingLiteral>(e))
      return Val::float_node(constant(f->getValueAsApproximateDouble()));
    if (const auto* i = llvm::dyn_cast<clang::IntegerLiteral>(e))
      return Val::integer(i->getValue().getSExtValue());
    if (const auto* b = llvm::dyn_cast<clang::CXXBoolLiteralExpr>(e))
      return Val::known(b->getValue());
    if (const auto* r = llvm::dyn_cast<clang::DeclRefExpr>(e)) {
      if (const auto* v = llvm::dyn_cast<clang::VarDecl>(r->getDecl())) return var_value(v, e, s);
      if (const auto* k = llvm::dyn_cast<clang::EnumConstantDecl>(r->getDecl()))
        return Val::integer(k->getInitVal().getSExtValue());
      fail(e->getBeginLoc(), "unsupported reference to '" + r->getDecl()->getNameAsString() + "'");
    }
    if (const auto* u = llvm::dyn_cast<clang::UnaryOperator>(e)) return unary(u, s);
    if (const auto* b = llvm::dyn_cast<clang::BinaryOperator>(e)) return binary(b, s);
    if (const auto* c = llvm::dyn_cast<clang::ConditionalOperator>(e)) {
      const Val cond = to_cond(expr(c->getCond(), s), c->getCond());
      if (cond.is_known_cond()) return expr(cond.truth ? c->getTrueExpr() : c->getFalseExpr(), s);
      // Each arm on its own copy of the state (an arm may assign), merged
      // as an if's branches are.
      Val a, b;
      State t = s, f = s;
      under(cond, [&] { a = expr(c->getTrueExpr(), t); });
      under(cond_not(cond), [&] { b = expr(c->getFalseExpr(), f); });
      merge_states(cond, t, f, s, c, c->getQuestionLoc());
      if (c->getType()->isBooleanType())
        return merge(cond, to_cond(a, c->getTrueExpr()), to_cond(b, c->getFalseExpr()), c,
                     c->getQuestionLoc(), "?:");
      return Val::float_node(select(cond, to_float(a, c->getQuestionLoc(), "?:"),
                                    to_float(b, c->getQuestionLoc(), "?:"), c,
                                    c->getQuestionLoc()));
    }
    if (const auto* c = llvm::dyn_cast<clang::CallExpr>(e)) return call_expr(c, s);
    if (llvm::isa<clang::CXXThisExpr>(e) || llvm::isa<clang::MemberExpr>(e))
      fail(e->getBeginLoc(), "unsupported: members and objects in a SHARC_ELEMENTWISE function");
    if (llvm::isa<clang::ArraySubscriptExpr>(e))
      fail(e->getBeginLoc(), "unsupported: arrays in a SHARC_ELEMENTWISE function");
    fail(e->getBeginLoc(), std::string("unsupported expression (") + e->getStmtClassName() + ")");
  }

  Val cast(const clang::CastExpr* c, const clang::Expr* sub, State& s) {
    switch (c->getCastKind()) {
      case clang::CK_FloatingToIntegral: {
        const Val v = expr(sub, s);
        if (v.kind == Val::kInt) return v;
        fail_data_integer(c->getBeginLoc());
      }
      case clang::CK_IntegralToBoolean:
      case clang::CK_FloatingToBoolean:
        return to_cond(expr(sub, s), sub);
      case clang::CK_IntegralToFloating: {
        // An integer used as a float stops being an integer: 1 / 4 is 0 but
        // float(1) / 4 is 0.25.
        const Val v = expr(sub, s);
        if (v.kind == Val::kInt) return Val::float_node(constant(static_cast<double>(v.i)));
        return Val::float_node(to_float(v, c->getBeginLoc(), "a value"));
      }
      case clang::CK_BooleanToSignedIntegral:
      case clang::CK_IntegralCast: {
        // A bool promoted to int (a + b, a != b on bools) is its 0/1 mask,
        // which float arithmetic and comparisons take as is.
        const Val v = expr(sub, s);
        if (v.is_known_cond()) return Val::integer(v.truth ? 1 : 0);
        if (v.kind == Val::kCond) return Val::float_node(to_float(v, c->getBeginLoc(), "a value"));
        return v;
      }
      case clang::CK_PointerToBoolean:
      case clang::CK_ArrayToPointerDecay:
        fail(c->getBeginLoc(), "unsupported: pointers in a SHARC_ELEMENTWISE function");
      default:
        return expr(sub, s);  // lvalue-to-rvalue, float promotions, no-ops
    }
  }

  Val unary(const clang::UnaryOperator* u, State& s) {
    const clang::Expr* x = u->getSubExpr();
    switch (u->getOpcode()) {
      case clang::UO_Minus: {
        const Val v = expr(x, s);
        if (v.kind == Val::kInt) return Val::integer(-v.i);
        return Val::float_node(
            add(Op::kNeg, {to_float(v, u->getOperatorLoc(), "-")}, u, u->getOperatorLoc()));
      }
      case clang::UO_Plus:
        return expr(x, s);
      case clang::UO_LNot:
        return cond_not(to_cond(expr(x, s), x));
      case clang::UO_PreInc:
      case clang::UO_PostInc:
      case clang::UO_PreDec:
      case clang::UO_PostDec: {
        const clang::VarDecl* v = assigned_var(x);
        const Val old = var_value(v, x, s);
        const bool inc = u->getOpcode() == clang::UO_PreInc || u->getOpcode() == clang::UO_PostInc;
        const Val one = Val::integer(1);
        const Val now =
            convert(arith(inc ? clang::BO_Add : clang::BO_Sub, old, one, u, u->getOperatorLoc()),
                    v->getType(), u);
        s.env[v] = now;
        return u->isPrefix() ? now : old;
      }
      case clang::UO_Deref:
      case clang::UO_AddrOf:
        fail(u->getOperatorLoc(), "unsupported: pointers in a SHARC_ELEMENTWISE function");
      default:
        fail(u->getOperatorLoc(), "unsupported operator '" +
                                      clang::UnaryOperator::getOpcodeStr(u->getOpcode()).str() +
                                      "'");
    }
  }

  Val binary(const clang::BinaryOperator* b, State& s) {
    const clang::BinaryOperatorKind k = b->getOpcode();
    const clang::SourceLocation at = b->getOperatorLoc();
    if (b->isAssignmentOp()) {
      const clang::VarDecl* v = assigned_var(b->getLHS());
      Val value = expr(b->getRHS(), s);
      if (b->isCompoundAssignmentOp()) {
        const Val old = var_value(v, b->getLHS(), s);
        value = arith(clang::BinaryOperator::getOpForCompoundAssignment(k), old, value, b, at);
      }
      s.env[v] = convert(value, v->getType(), b);
      return s.env[v];
    }
    if (k == clang::BO_Comma) {
      expr(b->getLHS(), s);
      return expr(b->getRHS(), s);
    }
    if (k == clang::BO_LAnd || k == clang::BO_LOr) {
      // The right side runs only where the left does not decide (as C++
      // short-circuits): not at all when the left is known, else on a copy
      // of the state merged under that condition.
      const Val l = to_cond(expr(b->getLHS(), s), b->getLHS());
      const Val runs = k == clang::BO_LAnd ? l : cond_not(l);
      if (runs.is_known_cond()) {
        if (!runs.truth) return l;
        return to_cond(expr(b->getRHS(), s), b->getRHS());
      }
      Val r;
      State t = s;
      const State f = s;
      under(runs, [&] { r = to_cond(expr(b->getRHS(), t), b->getRHS()); });
      merge_states(runs, t, f, s, b, at);
      return k == clang::BO_LAnd ? cond_and(l, r, b, at) : cond_or(l, r, b, at);
    }
    const Val l = expr(b->getLHS(), s), r = expr(b->getRHS(), s);
    if (b->isComparisonOp()) return compare(k, l, r, b, at);
    return arith(k, l, r, b, at);
  }

  // ---- statements -----------------------------------------------------------
  void statement(const clang::Stmt* st, State& s) {
    if (s.done.is_known_cond() && s.done.truth) return;  // after a return on every path
    if (const auto* c = llvm::dyn_cast<clang::CompoundStmt>(st)) {
      // After a return under a condition, the rest runs where it failed.
      for (const clang::Stmt* x : c->body()) under(cond_not(s.done), [&] { statement(x, s); });
      return;
    }
    if (llvm::isa<clang::NullStmt>(st)) return;
    if (const auto* d = llvm::dyn_cast<clang::DeclStmt>(st)) {
      for (const clang::Decl* x : d->decls()) declare(x, s);
      return;
    }
    if (const auto* r = llvm::dyn_cast<clang::ReturnStmt>(st)) {
      if (!r->getRetValue()) fail(r->getReturnLoc(), "a return without a value");
      const int v = to_float(expr(r->getRetValue(), s), r->getReturnLoc(), "return");
      s.result =
          s.result.kind == Val::kNone
              ? Val::float_node(v)
              : Val::float_node(select(s.done, to_float(s.result, r->getReturnLoc(), "return"), v,
                                       r, r->getReturnLoc()));
      s.done = Val::known(true);
      return;
    }
    if (const auto* i = llvm::dyn_cast<clang::IfStmt>(st)) {
      if (i->getInit() || i->getConditionVariable())
        fail(i->getIfLoc(), "unsupported: a declaration in an if's condition");
      const Val c = to_cond(expr(i->getCond(), s), i->getCond());
      if (c.is_known_cond()) {
        if (c.truth)
          statement(i->getThen(), s);
        else if (i->getElse())
          statement(i->getElse(), s);
        return;
      }
      State t = s, f = s;
      under(c, [&] { statement(i->getThen(), t); });
      if (i->getElse()) under(cond_not(c), [&] { statement(i->getElse(), f); });
      merge_states(c, t, f, s, i, i->getIfLoc());
      return;
    }
    if (const auto* f = llvm::dyn_cast<clang::ForStmt>(st)) {
      if (f->getInit()) statement(f->getInit(), s);
      loop(f->getForLoc(), f->getCond(), f->getBody(), f->getInc(), s);
      return;
    }
    if (const auto* w = llvm::dyn_cast<clang::WhileStmt>(st)) {
      loop(w->getWhileLoc(), w->getCond(), w->getBody(), nullptr, s);
      return;
    }
    if (const auto* e = llvm::dyn_cast<clang::Expr>(st)) {
      expr(e, s);
      return;
    }
    if (llvm::isa<clang::BreakStmt>(st) || llvm::isa<clang::ContinueStmt>(st))
      fail(st->getBeginLoc(),
           "unsupported: break and continue (a lifted loop runs its constant "
           "trip count; use an if in the body)");
    fail(st->getBeginLoc(), std::string("unsupported statement (") + st->getStmtClassName() + ")");
  }

  void declare(const clang::Decl* d, State& s) {
    const auto* v = llvm::dyn_cast<clang::VarDecl>(d);
    if (!v) return;  // typedefs, using-declarations
    if (v->isStaticLocal() || v->hasGlobalStorage()) {
      // A static constant (static constexpr float k = ...) is no state.
      if (const std::optional<Val> c = compile_time_constant(v)) {
        s.env[v] = *c;
        return;
      }
      fail(v->getLocation(), "static or global state: '" + v->getNameAsString() +
                                 "' keeps its value between calls; a lifted function must be "
                                 "pure (make it a constexpr constant or a local)");
    }
    check_local_type(v);
    s.env[v] = v->getInit() ? convert(expr(v->getInit(), s), v->getType(), v->getInit()) : Val{};
  }

  void loop(clang::SourceLocation at, const clang::Expr* cond, const clang::Stmt* body,
            const clang::Expr* inc, State& s) {
    for (int k = 0;; ++k) {
      if (s.done.is_known_cond() && s.done.truth) return;  // returned on every path
      if (cond) {
        const Val c = to_cond(expr(cond, s), cond);
        if (!c.is_known_cond()) {
          fail(cond->getBeginLoc(),
               "loop whose trip count depends on data: the condition '" + text_of(cond) +
                   "' is not known at compile time; a lifted loop must run a constant number "
                   "of times (it is unrolled)");
        }
        if (!c.truth) return;
      }
      if (k == options_.max_loop_iterations)
        fail(at, "loop runs more than " + std::to_string(options_.max_loop_iterations) +
                     " times; sharc-lift unrolls loops");
      statement(body, s);
      if (inc) expr(inc, s);
    }
  }

  clang::ASTContext& ctx_;
  const clang::SourceManager& sm_;
  const LowerOptions& options_;
  LiftedFunction& out_;
  unsigned error_id_ = 0;
  std::map<uint64_t, int> constants_;
  std::map<std::pair<Op, std::vector<int>>, int> made_;
  std::vector<const clang::FunctionDecl*> stack_;
  std::vector<Val> path_;  // the conditions the code being lowered runs under
};

std::string signature_of(const clang::FunctionDecl& f) {
  std::string s = f.getReturnType().getAsString() + " " + f.getNameAsString() + "(";
  bool first = true;
  for (const clang::ParmVarDecl* p : f.parameters()) {
    s += (first ? "" : ", ") + p->getType().getAsString() + " " + p->getNameAsString();
    first = false;
  }
  return s + ")";
}

class Finder : public clang::RecursiveASTVisitor<Finder> {
 public:
  explicit Finder(const clang::SourceManager& sm) : sm_(sm) {}
  bool VisitFunctionDecl(clang::FunctionDecl* f) {
    if (f->isThisDeclarationADefinition() && is_lifted(*f) &&
        !sm_.isInSystemHeader(sm_.getFileLoc(f->getLocation())))
      found.push_back(f);
    return true;
  }
  std::vector<const clang::FunctionDecl*> found;

 private:
  const clang::SourceManager& sm_;
};

}  // namespace

bool is_lifted(const clang::FunctionDecl& f) {
  for (const auto* a : f.specific_attrs<clang::AnnotateAttr>())
    if (a->getAnnotation() == "sharc_elementwise") return true;
  return false;
}

std::vector<LiftedFunction> lower_translation_unit(clang::ASTContext& ctx,
                                                   const LowerOptions& options) {
  Finder finder(ctx.getSourceManager());
  finder.TraverseDecl(ctx.getTranslationUnitDecl());
  std::vector<LiftedFunction> out;
  clang::DiagnosticsEngine& diags = ctx.getDiagnostics();
  const unsigned error = diags.getCustomDiagID(clang::DiagnosticsEngine::Error, "%0");
  const unsigned note = diags.getCustomDiagID(clang::DiagnosticsEngine::Note, "%0");
  // Tensor forms take Args, so they overload by arity only: float and
  // double versions of one function would define one Tensor form twice.
  std::map<std::tuple<std::vector<std::string>, std::string, size_t>, const clang::FunctionDecl*>
      forms;
  for (const clang::FunctionDecl* f : finder.found) {
    LiftedFunction lf;
    lf.name = f->getNameAsString();
    lf.signature = signature_of(*f);
    int index = 0;
    for (const clang::ParmVarDecl* p : f->parameters())
      lf.params.push_back(param_name(*p, index++));
    for (const clang::DeclContext* c = f->getDeclContext(); c; c = c->getParent())
      if (const auto* ns = llvm::dyn_cast<clang::NamespaceDecl>(c))
        lf.namespaces.insert(lf.namespaces.begin(), ns->getNameAsString());
    const auto [it, fresh] = forms.try_emplace({lf.namespaces, lf.name, lf.params.size()}, f);
    if (!fresh) {
      diags.Report(f->getLocation(), error)
          << "'" + lf.name + "' is lifted twice with " + std::to_string(lf.params.size()) +
                 " parameters; its Tensor form takes Tensors or numbers whatever the C++ "
                 "types, so mark one overload only";
      diags.Report(it->second->getLocation(), note) << std::string("the other one is here");
      continue;
    }
    try {
      FunctionLowerer lowerer(ctx, options, lf);
      lf.loc = source_loc(ctx.getSourceManager(), f->getLocation(), options.source_root);
      lowerer.lower(*f);
      ir::verify(lf.graph);
      out.push_back(std::move(lf));
    } catch (const Abandon&) {
      // Reported; the next function may still lower.
    } catch (const std::exception& e) {
      // A sharc bug: said at the function, not a crash.
      diags.Report(f->getLocation(), error)
          << std::string("internal error in sharc-lift (a bug; please report it): ") + e.what();
    }
  }
  return out;
}

}  // namespace sharc::lift
