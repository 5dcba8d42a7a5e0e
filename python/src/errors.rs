//! The package's typed exceptions. Bad input from Python raises one of these, never a panic.

use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};

create_exception!(
    _native,
    ReboundError,
    PyValueError,
    "Base of every error rebound raises for bad input (a ValueError)."
);
create_exception!(
    _native,
    ConfigError,
    ReboundError,
    "A machine configuration, scenario, policy or option that cannot be read."
);
create_exception!(
    _native,
    EventError,
    ReboundError,
    "An event the machine cannot take: malformed, or not asked for. The machine is unchanged."
);
create_exception!(
    _native,
    UnknownAnswerError,
    EventError,
    "An answer carrying an id that no command of this machine ever carried."
);
create_exception!(
    _native,
    UnexpectedEventError,
    EventError,
    "An event that makes no sense now (a second user message during a run): a driver bug."
);
create_exception!(
    _native,
    StreamError,
    ReboundError,
    "Bytes that are no valid stream of the provider. `failure` holds the classified \
     ProviderFailure (JSON shape), to answer the request with ProviderFailed."
);
create_exception!(
    _native,
    TraceError,
    ReboundError,
    "A trace that cannot be read: empty, another format or version, a bad or cut line."
);
create_exception!(
    _native,
    RequestError,
    ReboundError,
    "A request body that cannot be built: an empty conversation, tool calls not answered \
     in order, or options the provider refuses."
);
create_exception!(
    _native,
    BudgetError,
    ReboundError,
    "A permit ask, budget note or ticket a retry budget cannot take: malformed, or a ticket \
     whose answer is still to come. The budget is unchanged."
);
create_exception!(
    _native,
    ReentrantCallError,
    ReboundError,
    "A call on a machine, stream decoder or retry budget made from inside another call on \
     the same object (Python code such as a `__del__` that ran while it worked). Calls from \
     other threads wait their turn instead."
);
create_exception!(
    _native,
    SimulationError,
    PyRuntimeError,
    "The simulator could not complete a run: the machine livelocked or stalled. A bug in \
     rebound, never a scenario's failure; the message names the seed that reproduces it."
);
