# sharc_add_program() is defined here (see README "Build integration").
