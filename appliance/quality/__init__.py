"""Side area: answer quality of a served model, measured with the appliance's own evaluation sets."""
