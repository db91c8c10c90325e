"""Handler-owned arrays: :class:`NDArray` and the scalar :class:`Number`.

As in Sigma, user code never holds live data: an NDArray is a handle to a handler's buffer, reading it gives a
copy (:meth:`NDArray.to_numpy`) and changing it goes through the handler, so a GPU handler can run asynchronously
and a handler can recycle buffers between iterations. Operators (``a + b``, ``a @ w``, ``a[1:3]``) and methods
(``a.sum()``) forward to the handler's ops, so layer code reads like NumPy while every step is differentiable.
"""

from sigma_core.errors import SigmaError


class ExpiredArrayError(SigmaError):
    """An array from an earlier session was used after its buffer was recycled."""


class NDArray:
    """An n-dimensional array owned by a handler. See the module docstring."""

    __slots__ = ("_data", "handler", "_node", "_kept")

    def __init__(self, data, handler):
        self._data = data
        self.handler = handler
        self._node = None  # slot on the active tape, when traced
        self._kept = False  # True: never recycled by the handler's sessions

    @property
    def data(self):
        """The live buffer, for handler and kernel code; user code calls to_numpy()."""
        data = self._data
        if data is None:
            raise ExpiredArrayError("this array was created in an earlier training session and its buffer "
                                    "has been recycled; call handler.keep(array) to keep it across iterations")
        return data

    @property
    def shape(self) -> tuple:
        data = self._data  # not self.data: read on every op, and a property call costs
        return (data if data is not None else self.data).shape

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return int(self.data.size)

    @property
    def dtype(self) -> str:
        return str(self.data.dtype)

    @property
    def is_integer(self) -> bool:
        """True for integer arrays (class labels), False for floating-point and boolean ones."""
        return self.data.dtype.kind in "iu"

    def __len__(self):
        return self.shape[0]

    def to_numpy(self):
        """A NumPy copy of the data; changing it does not change this array."""
        return self.handler.to_numpy(self)

    def item(self) -> float:
        return self.handler.to_numpy(self).item()

    def __float__(self):
        return float(self.item())

    def __array__(self, dtype=None, copy=None):
        array = self.to_numpy()
        return array if dtype is None else array.astype(dtype)

    def __bool__(self):
        if self.size != 1:
            raise ValueError("the truth value of an array with more than one element is ambiguous")
        return bool(self.item())

    def __repr__(self):
        name = type(self).__name__
        if self._data is None:
            return f"<{name} (expired)>"
        return f"{name}({self.to_numpy()!r}, handler={self.handler.name}, dtype={self.dtype})"

    __hash__ = object.__hash__  # arrays are identities; == is not overloaded

    @property
    def T(self):
        return self.handler.transpose(self)

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return self.handler.reshape(self, shape)

    def transpose(self, *axes):
        return self.handler.transpose(self, axes or None)

    def __neg__(self):
        return self.handler.negative(self)

    def __abs__(self):
        return self.handler.abs(self)

    def __getitem__(self, index):
        return self.handler.getitem(self, index)

    def sum(self, axis=None, keepdims=False):
        return self.handler.sum(self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims=False):
        return self.handler.mean(self, axis=axis, keepdims=keepdims)

    def max(self, axis=None, keepdims=False):
        return self.handler.max(self, axis=axis, keepdims=keepdims)

    def min(self, axis=None, keepdims=False):
        return self.handler.min(self, axis=axis, keepdims=keepdims)

    def argmax(self, axis=None):
        return self.handler.argmax(self, axis=axis)


def _operator(op: str, reflected: bool):
    if reflected:  # ``2 * a``: the operands swap
        def method(self, other):
            return getattr(self.handler, op)(other, self)
    else:
        def method(self, other):
            return getattr(self.handler, op)(self, other)
    return method


#: dunder -> handler op, both ways; then the comparisons, which give boolean masks, not differentiable
_OPERATORS = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide", "pow": "power",
              "matmul": "matmul"}
for _name, _op in _OPERATORS.items():
    setattr(NDArray, f"__{_name}__", _operator(_op, False))
    setattr(NDArray, f"__r{_name}__", _operator(_op, True))
for _name, _op in {"gt": "greater", "ge": "greater_equal", "lt": "less", "le": "less_equal"}.items():
    setattr(NDArray, f"__{_name}__", _operator(_op, False))


class Number(NDArray):
    """A scalar (Sigma's INumber): a 0-d array whose value reads out as a float."""

    __slots__ = ()

    @property
    def value(self) -> float:
        return float(self.item())
