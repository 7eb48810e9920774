// A fixture for Layers.LayerCheckRefusesAnUpwardInclude: the runtime
// including serving, above it. Never compiled.
#pragma once
#include "serve/engine.h"
