"""The pure domain: rules as functions over plain data. No I/O, no Faust, no clock."""
