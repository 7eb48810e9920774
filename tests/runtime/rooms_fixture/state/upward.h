// A fixture for Runtime.RoomCheckRefusesAnUpwardInclude: a file of the
// lowest rooms that includes one above it. Never compiled.
#pragma once

#include "runtime/train/trainer.h"
