// troupe::jit: ScriptModules made by tracing (jit::trace), their graphs and code.
#pragma once

#include <troupe/jit/ir.h>
#include <troupe/jit/script_module.h>
