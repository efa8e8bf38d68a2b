// SPDX-License-Identifier: Apache-2.0
#include <durable/durable.hpp>

#include "shop.hpp"

int main() {
  durable::Runtime runtime({.database = "shop.db"});
  runtime.add(shop::checkout());
  runtime.serve();
}
