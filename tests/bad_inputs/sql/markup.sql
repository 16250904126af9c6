select 'see [citation needed] here' as x, '[/quote]' as "[/y]";
