// The engine config of a deployment's replicas: what a scenario's model, limits, hardware and
// deployment make of engine_config (engine/engine.h). In mode sim it adds the simulated device,
// the shapes and dtypes as priced, the placement and the planner's KV capacity and memory
// (engine/memplan.h). The runner builds each replica from it; a hot swap (faults/) builds the
// config of its new weights with it. Which replica implementation runs it is serving/'s.
#pragma once

#include "engine/engine.h"
#include "kernels/clock.h"
#include "kernels/status.h"
#include "scenarios/scenario.h"

// The engine config of d's replicas with model m and weights held as wdt, on clock (the run's:
// monotonic, or virtual in mode sim). Mode real: the backend, layout, limits and threads per
// rank. SC_INVALID when d does not fit (mode sim: the planner's reason in err).
sc_status scenario_engine_config(const scenario *s, const scn_deployment *d, const model_config *m,
                                 sc_dtype wdt, sc_clock clock, engine_config *c, sc_error *err);
