// Errors raised by PipeStudio's libraries.
//
// Library code (core, engine, profiler) reports failures by throwing ps::Error with a message a
// user can act on: it names the file, node, tensor or stage involved. The application edge (CLI
// commands, GUI actions) catches it and shows the message; libraries never print or exit.
#pragma once

#include <stdexcept>
#include <string>

namespace ps {

class Error : public std::runtime_error
{
public:
    using std::runtime_error::runtime_error;
};

} // namespace ps
