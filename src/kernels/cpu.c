/* kernels: what this CPU can run. The reference kernels run everywhere;
 * the optimized ISA levels are chosen here once, at start. */
#include "dsinfer.h"
#include "base/base.h"

const char *dsi_isa_name(void) { return "scalar"; }
void dsi_set_log_level(int level) { dsi_log_set_level(level); }
